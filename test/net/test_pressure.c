/* Sockets and listeners when the process runs short of resources:
 *  - a TCP connection whose request arrives while the block pool has only a
 *    few blocks left reads all of it (a read that filled the few blocks it
 *    got is not taken for a drained kernel, which under edge-triggered epoll
 *    would leave the rest unread until the peer sends more);
 *  - a listener whose accept fails for want of descriptors accepts the
 *    waiting connection once descriptors are free again, without a new
 *    connection arriving to wake it.
 *
 * Both change process-wide limits (the pool's cap, RLIMIT_NOFILE), hence an
 * executable of their own; the pool's cap is set before the first block. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "event/loop.h"
#include "iobuf/block_pool.h"
#include "jetrpc/flags.h"
#include "net/listener.h"
#include "net/socket.h"
#include "testutil.h"
#include "testutil_net.h"

#define GUARD_US (10LL * 1000 * 1000) /* bounds every wait; never a timing assertion */

/* ---- a short block pool ---------------------------------------------------- */

static _Atomic size_t g_got;
static _Atomic int g_failed;

static void short_on_read(jet_socket_t *s)
{
    atomic_fetch_add(&g_got, jet_iobuf_len(&s->read_buf));
    jet_iobuf_clear(&s->read_buf); /* consumed: its blocks are free again */
}

static void short_on_failed(jet_socket_t *s, int err)
{
    (void)s;
    atomic_store(&g_failed, err);
}

static const jet_socket_handler_t short_handler = {.on_read = short_on_read,
                                                   .on_failed = short_on_failed};

#define POOL_BLOCKS 128 /* one 1 MiB region of 8 KiB blocks */
#define SPARE       6   /* blocks left to the connection: fewer than one read offers */

static jet_block_t *g_held[POOL_BLOCKS + 1];
static int g_nheld;

/* Frees blocks on a thread of its own, whose exit returns its block cache
 * to the pool for every thread. */
static void *give_back_main(void *arg)
{
    int k = *(int *)arg;
    for (int i = 0; i < k && g_nheld > 0; i++)
        jet__block_unref(g_held[--g_nheld]);
    return NULL;
}

static void give_back(int k)
{
    pthread_t th;
    if (pthread_create(&th, NULL, give_back_main, &k) != 0) abort();
    pthread_join(th, NULL);
}

static void test_tcp_read_with_a_short_pool(void)
{
    /* Everything but SPARE blocks is held by the test. */
    while (g_nheld < POOL_BLOCKS + 1) {
        jet_block_t *b = jet__block_alloc_default();
        if (!b) break;
        g_held[g_nheld++] = b;
    }
    JT_REQUIRE(g_nheld == POOL_BLOCKS); /* the cap holds */
    give_back(SPARE);

    int sv[2];
    JT_REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
    int big = 1 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    /* A whole request waits in the kernel when the connection is registered
     * (as one that arrives with its connection): one edge, no more. */
    static char msg[100 * 1024];
    memset(msg, 'x', sizeof msg);
    JT_REQUIRE(write(sv[1], msg, sizeof msg) == (ssize_t)sizeof msg);
    jet_addr_t peer;
    JT_REQUIRE(jet__addr_parse("unix:/tmp/jetrpc-net-pressure", &peer) == 0);
    jet_socket_t *s = NULL;
    JT_REQUIRE(jet__socket_accept(sv[0], &peer, JET_SOCKET_MODE_TCP, jet_loop_at(0),
                                  &short_handler, NULL, &s) == 0);
    JT_CHECK(JT_WAIT_UNTIL(atomic_load(&g_got) == sizeof msg || atomic_load(&g_failed) != 0,
                           GUARD_US));
    JT_CHECK_EQ(atomic_load(&g_got), sizeof msg);
    JT_CHECK_EQ(atomic_load(&g_failed), 0);

    jet__socket_unref(s);
    close(sv[1]);
    give_back(g_nheld);
    JT_CHECK_EQ(g_nheld, 0);
    /* The loop thread closes the socket's descriptor once it has seen the
     * EOF: the next case counts descriptors. Nothing opens one meanwhile. */
    JT_CHECK(JT_WAIT_UNTIL(fcntl(sv[0], F_GETFD) < 0 && errno == EBADF, GUARD_US));
}

/* ---- a listener out of descriptors ------------------------------------------ */

static _Atomic int g_accepted;

static void count_accept(jet_listener_t *l, int fd, const jet_addr_t *peer, void *arg)
{
    (void)l;
    (void)peer;
    (void)arg;
    atomic_fetch_add(&g_accepted, 1);
    close(fd);
}

static void test_accept_after_emfile(void)
{
    jet_addr_t a;
    JT_REQUIRE(jet__addr_parse("127.0.0.1:0", &a) == 0);
    jet_listener_t *l = NULL;
    JT_REQUIRE(jet__listener_create(&a, count_accept, NULL, &l) == 0);
    int port = jet__listener_port(l);
    int c1 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    JT_REQUIRE(c1 >= 0);
    struct rlimit old, rl;
    JT_REQUIRE(getrlimit(RLIMIT_NOFILE, &old) == 0);
    rl = old;
    rl.rlim_cur = 256;
    JT_REQUIRE(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    /* Every descriptor taken: the listener's accept fails with EMFILE. */
    int fds[256], nfd = 0;
    for (int fd; nfd < 256 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;)
        fds[nfd++] = fd;
    jet_addr_t to;
    JT_REQUIRE(jet__addr_parse("127.0.0.1:0", &to) == 0);
    to.u.in4.sin_port = htons((uint16_t)port);
    JT_REQUIRE(connect(c1, &to.u.sa, to.len) == 0); /* in the backlog */
    jt_sleep_us(100 * 1000);                         /* the listener saw it and failed */
    JT_CHECK_EQ(atomic_load(&g_accepted), 0);
    for (int i = 0; i < nfd; i++)
        close(fds[i]);
    JT_REQUIRE(setrlimit(RLIMIT_NOFILE, &old) == 0);
    /* No other connection arrives: the listener must try again by itself. */
    JT_CHECK(JT_WAIT_UNTIL(atomic_load(&g_accepted) == 1, GUARD_US));
    close(c1);
    /* And it goes on accepting as before. */
    int c2 = jt_tcp_connect(port, 0);
    JT_CHECK(c2 >= 0);
    JT_CHECK(JT_WAIT_UNTIL(atomic_load(&g_accepted) == 2, GUARD_US));
    if (c2 >= 0) close(c2);
    jet__listener_destroy(l);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    jet_flag_set("iobuf_region_mb_8k", "1");
    jet_flag_set("iobuf_max_mb", "1");
    if (jet_loops_start(1) != 0) return 1;
    JT_RUN(test_tcp_read_with_a_short_pool);
    JT_RUN(test_accept_after_emfile);
    return jt_finish();
}
