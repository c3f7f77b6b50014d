/* A server whose iobuf memory runs out (iobuf_max_mb) while peers hold
 * unfinished requests and went silent (stalled or hostile uploads): the
 * server closes the silent peer holding the most memory, not the
 * connection it is reading, whose call then succeeds
 * (server_shed_stalled_ms). A peer silent for less than that long is not
 * closed, and with the flag 0 nothing is: the reading connection fails, as
 * it did before shedding existed.
 *
 * The server runs in a child (this executable, role=server) with a small
 * cap of its own; the silent peers are raw TCP sockets of this process. */
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

static int server_role(void)
{
    jt_echo_service_t svc;
    jt_echo_service_init(&svc, NULL);
    int port = 0;
    jet_server_t *srv = jt_echo_server_start(&svc, "127.0.0.1:0", NULL, &port);
    if (!srv) return 4;
    return jt_serve_until_stdin_closes(srv, port);
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

/* A peer that announces a 16 MiB request, sends `bytes` of it and stops.
 * The fd, or -1. */
static int silent_upload(int port, size_t bytes)
{
    int fd = jt_tcp_connect(port, 0);
    if (fd < 0) return -1;
    uint8_t head[12] = {'P', 'R', 'P', 'C'};
    uint32_t body = (uint32_t)(16 * MiB), meta = 10;
    for (int i = 0; i < 4; i++) {
        head[4 + i] = (uint8_t)(body >> (24 - 8 * i));
        head[8 + i] = (uint8_t)(meta >> (24 - 8 * i));
    }
    uint8_t *zeros = calloc(1, bytes);
    bool ok = zeros && jt_send_all(fd, head, sizeof head) && jt_send_all(fd, zeros, bytes);
    free(zeros);
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
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

/* Two silent peers hold 10 and 9 MiB of the child's 24; the good call needs
 * 6 MiB, more than is left, and gets it from the larger silent one. */
static void test_silent_upload_closed_for_a_served_call(void)
{
    jt_child_t c;
    JT_REQUIRE(child_start(&c, "200") == 0);
    int big = silent_upload(c.port, 10 * MiB);
    int small = silent_upload(c.port, 9 * MiB);
    JT_REQUIRE(big >= 0 && small >= 0);
    usleep(400 * 1000); /* silent for longer than server_shed_stalled_ms */
    JT_CHECK_EQ(good_call(c.port), 0);
    JT_CHECK(jt_wait_eof(big, 5000));
    JT_CHECK(!jt_wait_eof(small, 200)); /* the smaller one was not needed */
    close(big);
    close(small);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* Peers silent for less than server_shed_stalled_ms are left alone: the
 * connection being read fails instead (the call's error), and they stay. */
static void test_recent_upload_kept(void)
{
    jt_child_t c;
    JT_REQUIRE(child_start(&c, "60000") == 0);
    int big = silent_upload(c.port, 10 * MiB);
    int small = silent_upload(c.port, 9 * MiB);
    JT_REQUIRE(big >= 0 && small >= 0);
    JT_CHECK(good_call(c.port) != 0);
    JT_CHECK(!jt_wait_eof(big, 200));
    JT_CHECK(!jt_wait_eof(small, 200));
    close(big);
    close(small);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

/* server_shed_stalled_ms=0: never. */
static void test_shedding_off(void)
{
    jt_child_t c;
    JT_REQUIRE(child_start(&c, "0") == 0);
    int big = silent_upload(c.port, 10 * MiB);
    int small = silent_upload(c.port, 9 * MiB);
    JT_REQUIRE(big >= 0 && small >= 0);
    usleep(400 * 1000);
    JT_CHECK(good_call(c.port) != 0);
    JT_CHECK(!jt_wait_eof(big, 200));
    close(big);
    close(small);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
}

int main(int argc, char **argv)
{
    jt_self_init();
    if (argc > 1 && strcmp(argv[1], "role=server") == 0) return server_role();
    JT_RUN(test_silent_upload_closed_for_a_served_call);
    JT_RUN(test_recent_upload_kept);
    JT_RUN(test_shedding_off);
    return jt_finish();
}
