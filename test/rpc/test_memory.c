/* A server's memory limits, against peers that hold its memory:
 *  - its iobuf memory runs out (iobuf_max_mb) while peers hold unfinished
 *    requests and went silent (stalled or hostile uploads): the server
 *    closes the silent peer holding the most memory, not the connection it
 *    is reading, whose call then succeeds (server_shed_stalled_ms), also
 *    when that peer has a call in flight (its input is freed when it is
 *    closed, not when its last call ends). A peer silent for less than that
 *    long is not closed, and with the flag 0 nothing is: the reading
 *    connection fails, as it did before shedding existed;
 *  - a client that writes all its requests before it reads any answer is
 *    read to the end while its answers stay under socket_max_unwritten_bytes,
 *    although the server gives its loop to other connections between turns
 *    of its requests (a turn's end is no pause for the limit).
 *
 * The server runs in a child (this executable, role=server) with limits of
 * its own; the peers are raw TCP sockets of this process. */
#include <sys/un.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "testutil_net.h"
#include "testutil_rpc.h"
#include "testutil_transport.h"

#define MiB ((size_t)1 << 20)

/* The child's memory: 8 KiB blocks in 4 MiB regions, at most 24 MiB in all
 * (the other classes' regions at their smallest: a TCP server reads into
 * 8 KiB blocks only). */
#define CHILD_CAP_MB "24"
#define GOOD_ATT     (6 * MiB) /* the good call's attachment */

/* role=server [unix=<path>]: on a free TCP port, or on the Unix socket
 * path (then it prints 1 for its port). */
static int server_role(int argc, char **argv)
{
    jt_echo_service_t svc;
    jt_echo_service_init(&svc, NULL);
    char addr[128] = "127.0.0.1:0";
    if (argc > 2 && strncmp(argv[2], "unix=", 5) == 0)
        snprintf(addr, sizeof addr, "unix:%s", argv[2] + 5);
    int port = 0;
    jet_server_t *srv = jt_echo_server_start(&svc, addr, NULL, &port);
    if (!srv) return 4;
    return jt_serve_until_stdin_closes(srv, addr[0] == 'u' ? 1 : port);
}

static int child_start(jt_child_t *c, const char *shed_ms)
{
    char shed[64];
    snprintf(shed, sizeof shed, "JETRPC_SERVER_SHED_STALLED_MS=%s", shed_ms);
    const char *envs[] = {"JETRPC_IOBUF_MAX_MB=" CHILD_CAP_MB,
                          "JETRPC_IOBUF_REGION_MB_8K=4",
                          "JETRPC_IOBUF_REGION_MB_64K=1",
                          "JETRPC_IOBUF_REGION_MB_2M=2",
                          shed,
                          NULL};
    const char *args[] = {NULL};
    return jt_child_start(c, args, envs);
}

/* A server child on the Unix socket path, whose answers may wait
 * unwritten up to limit bytes. */
static int child_start_unwritten(jt_child_t *c, const char *path, size_t limit)
{
    char lim[64], arg[128];
    snprintf(lim, sizeof lim, "JETRPC_SOCKET_MAX_UNWRITTEN_BYTES=%zu", limit);
    snprintf(arg, sizeof arg, "unix=%s", path);
    const char *envs[] = {lim, NULL};
    const char *args[] = {arg, NULL};
    return jt_child_start(c, args, envs);
}

/* Echo with a GOOD_ATT attachment over a fresh channel: 0, or the call's
 * error code. The answer's bytes are compared. */
static int good_call(int port)
{
    jet_channel_t *ch = jt_channel_open_port(port, JET_CONNECTION_SINGLE, 10000, 0);
    if (!ch) return -1;
    int rc = jt_echo_bytes(ch, GOOD_ATT, 1, "good");
    jet_channel_destroy(ch);
    return rc;
}

/* A child with server_shed_stalled_ms shed_ms; two peers hold 10 and 9 MiB
 * of its 24 in unfinished requests (the larger one sends a complete request
 * first_msg first; NULL: none) and stay silent quiet_ms; then a good call
 * that needs 6 MiB, more than is left. It succeeds when served is set, and
 * the larger silent peer is closed for it then; otherwise it fails and
 * neither peer is closed. The smaller one is never needed. */
static void shed_case(const char *shed_ms, const char *first_msg, int quiet_ms, bool served)
{
    jt_child_t c;
    JT_REQUIRE(child_start(&c, shed_ms) == 0);
    int big = jt_silent_upload(c.port, 16 * MiB, 10 * MiB, first_msg);
    int small = jt_silent_upload(c.port, 16 * MiB, 9 * MiB, NULL);
    JT_REQUIRE(big >= 0 && small >= 0);
    if (quiet_ms > 0) usleep((useconds_t)quiet_ms * 1000);
    if (served) {
        JT_CHECK_EQ(good_call(c.port), 0);
        JT_CHECK(jt_wait_eof(big, 5000));
    } else {
        JT_CHECK(good_call(c.port) != 0);
        JT_CHECK(!jt_wait_eof(big, 200));
    }
    JT_CHECK(!jt_wait_eof(small, 200));
    close(big);
    close(small);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* Silent for longer than server_shed_stalled_ms: the larger peer is closed. */
static void test_silent_upload_closed_for_a_served_call(void)
{
    shed_case("200", NULL, 400, true);
}

/* As above, but the larger silent peer has a call in flight (answered
 * 3 s later from another thread): closing it frees its input at once, not
 * when that call ends, so it alone is closed and the good call succeeds
 * (before, its memory stayed until the answer, every 10 ms another
 * connection was closed, and the good call failed all the same). */
static void test_silent_upload_with_a_call_in_flight(void)
{
    shed_case("200", "later:3000", 400, true);
}

/* Peers silent for less than server_shed_stalled_ms are left alone: the
 * connection being read fails instead (the call's error), and they stay. */
static void test_recent_upload_kept(void)
{
    shed_case("60000", NULL, 0, false);
}

/* server_shed_stalled_ms=0: never. */
static void test_shedding_off(void)
{
    shed_case("0", NULL, 400, false);
}

/* ---- answers nobody reads yet ------------------------------------------------ */

typedef struct writer {
    int fd;
    jt_bytes_t b;
    _Atomic int done;
} writer_t;

static void *writer_main(void *arg)
{
    writer_t *w = arg;
    (void)jt_send_all(w->fd, w->b.p, w->b.len);
    atomic_store(&w->done, 1);
    return NULL;
}

/* A client writes all its requests (small ones: many a turn, so that the
 * server yields its loop between turns), then reads the answers: nine
 * tenths of the limit in all. The server must take every request, as
 * answers under the limit never pause its reading. A turn's end used to
 * resume only once half the limit was left, as a pause for the limit does:
 * with more than half the limit unwritten the server stopped reading, the
 * client's writes blocked once the kernel's buffers were full, and neither
 * side moved again. Over a Unix socket, whose buffers are small and fixed
 * (TCP's grow to tens of MiB on loopback). */
static void test_writes_all_then_reads(void)
{
    const size_t limit = 8 * MiB;
    char path[108];
    snprintf(path, sizeof path, "/tmp/jt-rpc-memory-%d.sock", (int)getpid());
    jt_child_t c;
    JT_REQUIRE(child_start_unwritten(&c, path, limit) == 0);
    enum { ATT = 256 };
    writer_t w = {.fd = socket(AF_UNIX, SOCK_STREAM, 0)};
    JT_REQUIRE(w.fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    JT_REQUIRE(connect(w.fd, (struct sockaddr *)&sa, sizeof sa) == 0);
    size_t n = 0;
    while (w.b.len < limit / 10 * 9)
        jt_bytes_echo_request(&w.b, (int64_t)++n, "x", NULL, ATT);
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, writer_main, &w) == 0);
    bool all = JT_WAIT_UNTIL(atomic_load(&w.done), 15 * 1000 * 1000);
    fprintf(stderr, "  %zu requests (%zu bytes) with the limit at %zu: %s\n", n, w.b.len, limit,
            all ? "all written" : "writer blocked");
    JT_CHECK(all);
    /* Then every answer comes (ending the writer when it was blocked). */
    size_t got = 0;
    jt_conn_t conn;
    jt_conn_init(&conn, w.fd);
    for (; got < n; got++) {
        jet_baidu_frame_t f;
        jet__baidu_frame_init(&f);
        int r = jt_conn_frame(&conn, 10000, &f, NULL, NULL);
        bool ok = r == 1 && f.meta->has_correlation_id &&
                  f.meta->correlation_id == (int64_t)got + 1 && jet_iobuf_len(&f.attachment) == ATT;
        jet__baidu_frame_fini(&f);
        if (!ok) break;
    }
    JT_CHECK_EQ(got, n);
    pthread_join(th, NULL);
    free(w.b.p);
    jt_conn_close(&conn);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    unlink(path);
}

int main(int argc, char **argv)
{
    jt_self_init();
    if (argc > 1 && strcmp(argv[1], "role=server") == 0) return server_role(argc, argv);
    JT_RUN(test_silent_upload_closed_for_a_served_call);
    JT_RUN(test_silent_upload_with_a_call_in_flight);
    JT_RUN(test_recent_upload_kept);
    JT_RUN(test_shedding_off);
    JT_RUN(test_writes_all_then_reads);
    return jt_finish();
}
