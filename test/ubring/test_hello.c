/* UBRing hello/ACK codec and shared-memory segment helpers (UBRING.md §2, §3). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "testutil.h"
#include "ubring/ubring_hello.h"
#include "ubring/ubring_ring.h"
#include "ubring/ubring_shm.h"

/* The client hello captured between a brpc client and a brpc server (§2.3). */
static const uint8_t captured_hello[64] = {
    0x55, 0x42, 0x00, 0x40, 0x00, 0x02, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00, 0x00,
    0x55, 0x42, 0x52, 0x49, 0x4e, 0x47, 0x5f, 0x31, 0x32, 0x37, 0x2e, 0x30, 0x2e, 0x30, 0x2e, 0x31,
    0x3a, 0x34, 0x38, 0x34, 0x36, 0x34, 0x5f, 0x43, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

static bool shm_exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/%s", name);
    return access(path, F_OK) == 0;
}

static void test_pack_matches_capture(void)
{
    jet_ubring_hello_t h = {.msg_len = 64, .hello_ver = 2, .impl_ver = 1, .len = 4194304};
    char name[JET_UBRING_NAME_BUF];
    JT_REQUIRE(jet__ubring_shm_client_name("127.0.0.1:48464", name) == 0);
    JT_CHECK(strcmp(name, "UBRING_127.0.0.1:48464_C") == 0);
    memcpy(h.shm_name, name, sizeof name);
    uint8_t out[64];
    memset(out, 0xee, sizeof out);
    jet__ubring_hello_pack(&h, out);
    JT_CHECK(memcmp(out, captured_hello, 64) == 0);
    /* The server's accepting answer is the same bytes (its len, the client's name). */
    jet_ubring_hello_t got;
    JT_CHECK_EQ(jet__ubring_hello_unpack(captured_hello, 64, &got), 64);
    JT_CHECK_EQ(got.msg_len, 64);
    JT_CHECK_EQ(got.hello_ver, 2);
    JT_CHECK_EQ(got.impl_ver, 1);
    JT_CHECK_EQ(got.len, 4194304);
    JT_CHECK(strcmp(got.shm_name, "UBRING_127.0.0.1:48464_C") == 0);
    JT_CHECK(jet__ubring_hello_versions_ok(&got));
    uint8_t echo[64];
    jet__ubring_hello_pack(&got, echo);
    JT_CHECK(memcmp(echo, captured_hello, 64) == 0);
}

static void test_byte_order_and_limits(void)
{
    jet_ubring_hello_t h = {
        .msg_len = 0x0102, .hello_ver = 0x0304, .impl_ver = 0x0506, .len = 0x0102030405060708ull};
    memset(h.shm_name, 'A', JET_UBRING_NAME_BUF); /* 48 bytes, no terminator on the wire */
    h.shm_name[JET_UBRING_NAME_BUF] = 0;
    uint8_t out[64];
    jet__ubring_hello_pack(&h, out);
    static const uint8_t head[16] = {'U', 'B', 1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6, 7, 8};
    JT_CHECK(memcmp(out, head, 16) == 0);
    for (int i = 16; i < 64; i++)
        JT_CHECK_EQ(out[i], 'A');
    /* msg_len 0x0102 = 258 > 64: incomplete with 64 bytes. */
    jet_ubring_hello_t got;
    JT_CHECK_EQ(jet__ubring_hello_unpack(out, 64, &got), -EAGAIN);
    uint8_t big[300];
    memset(big, 0x5a, sizeof big);
    memcpy(big, out, 64);
    JT_CHECK_EQ(jet__ubring_hello_unpack(big, sizeof big, &got), 258);
    JT_CHECK_EQ(strlen(got.shm_name), 48);
    JT_CHECK_EQ(got.len, 0x0102030405060708ull);
    h.msg_len = 64;
    h.len = UINT64_MAX;
    jet__ubring_hello_pack(&h, out);
    JT_CHECK_EQ(jet__ubring_hello_unpack(out, 64, &got), 64);
    JT_CHECK(got.len == UINT64_MAX);
    JT_CHECK(!jet__ubring_hello_versions_ok(&got));
}

static void test_unpack_rejects(void)
{
    uint8_t b[64];
    memcpy(b, captured_hello, 64);
    jet_ubring_hello_t got;
    /* Every proper prefix is incomplete, never an error. */
    for (size_t n = 0; n < 64; n++) {
        char label[32];
        snprintf(label, sizeof label, "prefix %zu", n);
        JT_CHECK_AT(label, jet__ubring_hello_unpack(b, n, &got) == -EAGAIN);
        JT_CHECK_AT(label, jet__ubring_hello_prefix(b, n));
    }
    b[3] = 63; /* msg_len < 64 */
    JT_CHECK_EQ(jet__ubring_hello_unpack(b, 64, &got), -EPROTO);
    b[2] = 0x10;
    b[3] = 0x01; /* 4097 > JET_UBRING_HELLO_MAX */
    JT_CHECK_EQ(jet__ubring_hello_unpack(b, 64, &got), -EPROTO);
    memcpy(b, captured_hello, 64);
    b[1] = 'X';
    JT_CHECK_EQ(jet__ubring_hello_unpack(b, 64, &got), -EPROTO);
    JT_CHECK(!jet__ubring_hello_prefix(b, 2));
    JT_CHECK(!jet__ubring_hello_prefix((const uint8_t *)"PRPC", 1));
    JT_CHECK(jet__ubring_hello_prefix((const uint8_t *)"U", 1));
}

static void test_refuse_and_ack(void)
{
    uint8_t out[64];
    memset(out, 0xcc, sizeof out);
    jet__ubring_hello_pack_refuse(out);
    static const uint8_t head[8] = {0x55, 0x42, 0x00, 0x40, 0, 0, 0, 0};
    JT_CHECK(memcmp(out, head, 8) == 0);
    for (int i = 8; i < 64; i++)
        JT_CHECK_EQ(out[i], 0);
    jet_ubring_hello_t got;
    JT_CHECK_EQ(jet__ubring_hello_unpack(out, 64, &got), 64);
    JT_CHECK(!jet__ubring_hello_versions_ok(&got));
    uint8_t ack[4];
    jet__ubring_ack_pack(ack, true);
    static const uint8_t on[4] = {0, 0, 0, 1};
    JT_CHECK(memcmp(ack, on, 4) == 0);
    JT_CHECK_EQ(jet__ubring_ack_unpack(ack), JET_UBRING_ACK_ON);
    jet__ubring_ack_pack(ack, false);
    JT_CHECK_EQ(jet__ubring_ack_unpack(ack), 0);
}

static void test_names(void)
{
    char c[JET_UBRING_NAME_BUF], s[JET_UBRING_NAME_BUF];
    JT_REQUIRE(jet__ubring_shm_client_name("127.0.0.1:45548", c) == 0);
    JT_REQUIRE(jet__ubring_shm_server_name(c, s) == 0);
    JT_CHECK(strcmp(s, "UBRING_127.0.0.1:45548_S") == 0);
    /* Up to the LAST '_'. */
    JT_REQUIRE(jet__ubring_shm_server_name("UBRING_test_C", s) == 0);
    JT_CHECK(strcmp(s, "UBRING_test_S") == 0);
    JT_CHECK_EQ(jet__ubring_shm_server_name("nounderscore", s), -EINVAL);
    /* A long IPv6 endpoint does not fit in 47 characters: refused, not truncated. */
    JT_CHECK_EQ(jet__ubring_shm_client_name("[fe80::1234:5678:9abc:def0:1234%eth0]:65535", c),
                -ENAMETOOLONG);
    JT_REQUIRE(jet__ubring_shm_client_name("[::1]:40000", c) == 0);
    JT_CHECK(strcmp(c, "UBRING_[::1]:40000_C") == 0);
    char n47[48];
    memset(n47, 'a', 47);
    n47[47] = 0;
    JT_CHECK(jet__ubring_shm_name_ok(n47));
    char n48[49];
    memset(n48, 'a', 48);
    n48[48] = 0;
    JT_CHECK(!jet__ubring_shm_name_ok(n48));
    JT_CHECK(!jet__ubring_shm_name_ok(""));
    JT_CHECK(!jet__ubring_shm_name_ok("a/b"));
    JT_CHECK(!jet__ubring_shm_name_ok(".."));
    JT_CHECK(!jet__ubring_shm_name_ok("a b"));
    /* The longest client name (47 characters) still has a server name. */
    char c47[JET_UBRING_NAME_BUF];
    snprintf(c47, sizeof c47, "UBRING_%s_C", "[fe80::1234:5678:9abc:def0:1234]:65535");
    JT_REQUIRE(strlen(c47) == 47);
    JT_CHECK_EQ(jet__ubring_shm_server_name(c47, s), 0);
    JT_CHECK_EQ(strlen(s), 47);
    /* What a server accepts as a client's segment name. */
    JT_CHECK(jet__ubring_shm_client_name_ok("UBRING_127.0.0.1:45548_C"));
    JT_CHECK(jet__ubring_shm_client_name_ok("UBRING_[::1]:40000_C"));
    JT_CHECK(jet__ubring_shm_client_name_ok(c47));
    JT_CHECK(!jet__ubring_shm_client_name_ok("UBRING_127.0.0.1:45548_S"));
    JT_CHECK(!jet__ubring_shm_client_name_ok("UBRING_127.0.0.1:_C"));
    JT_CHECK(!jet__ubring_shm_client_name_ok("UBRING_127.0.0.1:45x48_C"));
    JT_CHECK(!jet__ubring_shm_client_name_ok("UBRING_:45548_C"));
    JT_CHECK(!jet__ubring_shm_client_name_ok("UBRING_test_C"));
    JT_CHECK(!jet__ubring_shm_client_name_ok("other_app_segment"));
    JT_CHECK(!jet__ubring_shm_client_name_ok("XBRING_127.0.0.1:45548_C"));
    JT_CHECK(jet__ubring_shm_len_ok(4u << 20));
    JT_CHECK(jet__ubring_shm_len_ok(8u << 20));
    JT_CHECK(!jet__ubring_shm_len_ok(0));
    JT_CHECK(!jet__ubring_shm_len_ok((4u << 20) + 64));
    JT_CHECK(!jet__ubring_shm_len_ok(2u << 20));
    JT_CHECK(!jet__ubring_shm_len_ok(UINT64_MAX - (UINT64_MAX % (4u << 20))));
}

static void test_shm_lifecycle(void)
{
    char name[JET_UBRING_NAME_BUF];
    snprintf(name, sizeof name, "UBRING_test_%d_C", (int)getpid());
    shm_unlink(name);
    size_t len = 4u << 20;
    jet_ubring_shm_t a, b, c;
    JT_REQUIRE(jet__ubring_shm_create(name, len, &a) == 0);
    JT_CHECK(shm_exists(name));
    JT_CHECK(a.base != NULL && a.len == len && a.created);
    /* Zeroed; the mapping is shared with an opener. */
    const uint8_t *p = a.base;
    bool zero = true;
    for (size_t i = 0; i < len; i += 4096)
        zero &= p[i] == 0 && p[i + 4095] == 0;
    JT_CHECK(zero);
    JT_CHECK_EQ(jet__ubring_shm_create(name, len, &b), -EEXIST);
    JT_CHECK_EQ(jet__ubring_shm_open(name, 8u << 20, &b), -EINVAL); /* smaller than announced */
    JT_REQUIRE(jet__ubring_shm_open(name, len, &b) == 0);
    JT_CHECK(!b.created);
    ((uint8_t *)b.base)[JET_UBRING_OFF_HEART_BEAT] = 1;
    JT_CHECK_EQ(p[JET_UBRING_OFF_HEART_BEAT], 1);
    JT_CHECK_EQ(jet__ubring_shm_unlink(&b), 0); /* not the creator: no effect */
    JT_CHECK(shm_exists(name));
    JT_CHECK_EQ(jet__ubring_shm_unlink(&a), 0);
    JT_CHECK(!shm_exists(name));
    JT_CHECK_EQ(jet__ubring_shm_unlink(&a), 0); /* idempotent */
    /* Still mapped after the unlink. */
    ((uint8_t *)a.base)[100] = 7;
    JT_CHECK_EQ(((uint8_t *)b.base)[100], 7);
    jet__ubring_shm_unmap(&a);
    jet__ubring_shm_unmap(&a);
    jet__ubring_shm_unmap(&b);
    JT_CHECK(a.base == NULL && b.base == NULL);
    JT_CHECK_EQ(jet__ubring_shm_open(name, len, &c), -ENOENT);
    /* Bad sizes and names leave nothing behind. */
    JT_CHECK_EQ(jet__ubring_shm_create(name, len + 1, &c), -EINVAL);
    JT_CHECK_EQ(jet__ubring_shm_create(name, 0, &c), -EINVAL);
    JT_CHECK_EQ(jet__ubring_shm_create("bad/name", len, &c), -EINVAL);
    JT_CHECK(!shm_exists(name));
    jet_ubring_shm_t zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    JT_CHECK_EQ(jet__ubring_shm_unlink(&zeroed), 0);
    jet__ubring_shm_unmap(&zeroed);
}

/* A segment as a process killed mid-handshake leaves it: named, sized,
 * mapped by nobody, last modified age_s ago. */
static void leave_segment(const char *name, int age_s)
{
    shm_unlink(name);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    JT_REQUIRE(fd >= 0);
    JT_REQUIRE(ftruncate(fd, 4u << 20) == 0);
    time_t t = time(NULL) - age_s;
    struct timespec ts[2] = {{.tv_sec = t}, {.tv_sec = t}};
    JT_REQUIRE(futimens(fd, ts) == 0);
    close(fd);
}

static void *map_segment(const char *name)
{
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return NULL;
    void *p = mmap(NULL, 4u << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

/* Maps name in a child process until *stop_fd is closed; its pid. */
static pid_t map_in_child(const char *name, int *stop_fd)
{
    int ready[2], stop[2];
    if (pipe(ready) < 0 || pipe(stop) < 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(ready[0]);
        close(stop[1]);
        char c = map_segment(name) ? 1 : 0;
        if (write(ready[1], &c, 1) != 1) _exit(1);
        while (read(stop[0], &c, 1) > 0) {
        }
        _exit(0);
    }
    close(ready[1]);
    close(stop[0]);
    char c = 0;
    if (pid < 0 || read(ready[0], &c, 1) != 1 || c != 1) {
        close(stop[1]);
        if (pid > 0) waitpid(pid, NULL, 0);
        pid = -1;
    }
    close(ready[0]);
    *stop_fd = stop[1];
    return pid;
}

/* A name a dead process left behind is removed by a sweep; a name some
 * process maps, or one modified less than the age ago (its maker may be
 * about to map it), stays, and so does any other name. */
static void test_shm_stale(void)
{
    char old[JET_UBRING_NAME_BUF], fresh[JET_UBRING_NAME_BUF], mine[JET_UBRING_NAME_BUF],
        theirs[JET_UBRING_NAME_BUF], old_s[JET_UBRING_NAME_BUF], other[JET_UBRING_NAME_BUF];
    int pid = (int)getpid();
    snprintf(old, sizeof old, "UBRING_127.0.0.1:%d_C", pid);
    snprintf(old_s, sizeof old_s, "UBRING_127.0.0.1:%d_S", pid);
    snprintf(fresh, sizeof fresh, "UBRING_127.0.0.2:%d_C", pid);
    snprintf(mine, sizeof mine, "UBRING_127.0.0.3:%d_C", pid);
    snprintf(theirs, sizeof theirs, "UBRING_127.0.0.4:%d_C", pid);
    snprintf(other, sizeof other, "UBRING_127.0.0.5:%d_X", pid);
    size_t len = 4u << 20;

    leave_segment(fresh, 0);
    leave_segment(mine, 3600);
    void *m = map_segment(mine);
    JT_REQUIRE(m);
    leave_segment(theirs, 3600);
    int stop = -1;
    pid_t child = map_in_child(theirs, &stop);
    JT_REQUIRE(child > 0);
    leave_segment(old, 3600);
    leave_segment(old_s, 3600);
    leave_segment(other, 3600);
    jet_ubring_shm_t a;
    JT_CHECK_EQ(jet__ubring_shm_create(old, len, &a), -EEXIST); /* create never replaces */

    uint64_t bytes = 0;
    JT_CHECK(jet__ubring_shm_sweep(60, &bytes) >= 2); /* more: others' leftovers */
    JT_CHECK(bytes >= 2 * (uint64_t)len);
    JT_CHECK(!shm_exists(old) && !shm_exists(old_s));
    JT_CHECK(shm_exists(fresh) && shm_exists(mine) && shm_exists(theirs) && shm_exists(other));

    /* The first UBRing channel of a process starts a sweep. */
    leave_segment(old, 3600);
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.socket_mode = JET_SOCKET_MODE_UBRING;
    jet_channel_t *ch = NULL;
    JT_REQUIRE(jet_channel_create("127.0.0.1:1", &o, &ch) == 0);
    JT_CHECK(JT_WAIT_UNTIL(!shm_exists(old), 10000000));
    JT_CHECK(shm_exists(mine) && shm_exists(theirs));
    jet_channel_destroy(ch);

    close(stop);
    waitpid(child, NULL, 0);
    munmap(m, len);
    shm_unlink(fresh);
    shm_unlink(mine);
    shm_unlink(theirs);
    shm_unlink(other);
}

int main(void)
{
    JT_RUN(test_pack_matches_capture);
    JT_RUN(test_byte_order_and_limits);
    JT_RUN(test_unpack_rejects);
    JT_RUN(test_refuse_and_ack);
    JT_RUN(test_names);
    JT_RUN(test_shm_lifecycle);
    JT_RUN(test_shm_stale);
    return jt_finish();
}
