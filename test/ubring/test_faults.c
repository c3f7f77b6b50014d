/* Faults on UBRing connections: a server process killed mid-traffic (calls
 * fail promptly, the channel reconnects to the restarted server); a client
 * process killed mid-traffic; a peer that stops heart-beating (the
 * reference peer stopped with SIGSTOP, a raw client that never beats); a
 * peer that stops reading while a writer waits for room, or whose tail
 * claims room its unread chunks fill (no CPU spent on either past a short
 * spin); a request larger than the ring (EMSGSIZE naming
 * the limit, the channel goes on); corrupt chunks and a corrupt tail from a raw client (the server
 * drops that connection and serves the next); bad hellos (clean refusal);
 * the close protocol both ways, acknowledged or not (UBRING.md §8).
 * The raw client is written from UBRING.md, not from the implementation.
 * Every case ends with nothing mapped and no UBRING_* name left behind. */
#include <dirent.h>
#include <sys/resource.h>

#include "ubring_test.h"

#define GUARD_US (90 * 1000000LL)
/* How long a failure may take to reach the calls: far below brpc's 55 s. */
#define PROMPT_MS 15000

JET_FLAG_DECLARE_INT64(socket_max_unwritten_bytes);
JET_FLAG_DECLARE_INT32(ub_hb_timer_interval);
JET_FLAG_DECLARE_INT32(ub_hb_retry_cnt);
JET_FLAG_DECLARE_INT32(ub_event_queue_timer_interval);
JET_FLAG_DECLARE_INT32(ub_connect_timeout);
JET_FLAG_DECLARE_INT32(ub_disconnect_timeout);

static const char *const small_hb[] = {"--ub_hb_timer_interval=1", "--ub_hb_retry_cnt=2"};

/* ---- a killed server --------------------------------------------------------------- */

static void test_server_killed(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    jt_child_t c;
    const char *args[] = {"mode=ubring", NULL};
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    int port = c.port;
    jet_channel_t *ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 60000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 1000, 1, "warm"), 0);
    JT_CHECK(ubt_maps_count() > 0);
    /* Calls the server holds (answered after 30 s), and big echoes moving. */
    enum { N = 8 };
    jt_batch_t held = {0}, moving = {0};
    jt_slot_t *hs = jt_slots_new(&held, N, "sleep:30000", 10, 1, 1);
    jt_slot_t *ms = jt_slots_new(&moving, N, "big", 1 << 20, 4096, 100);
    jt_slots_issue(ch, hs, N);
    jt_slots_issue(ch, ms, N);
    usleep(300000);
    kill(c.pid, SIGKILL);
    int64_t killed_ms = jt_now_ms();
    waitpid(c.pid, NULL, 0);
    close(c.in_fd);
    JT_CHECK(jt_wait_at_least(&held.done, N, PROMPT_MS * 1000LL));
    JT_CHECK(jt_wait_at_least(&moving.done, N, PROMPT_MS * 1000LL));
    JT_CHECK_EQ(atomic_load(&held.failed), N);
    int64_t last = 0;
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < 2; k++) {
            jt_slot_t *s = k ? &ms[i] : &hs[i];
            if (!jet_call_failed(s->call)) continue;
            if (s->done_ms > last) last = s->done_ms;
            JT_CHECK_AT(jet_call_error_text(s->call),
                        ubt_connection_error(jet_call_error_code(s->call)));
        }
    }
    fprintf(stderr, "  calls ended %lld ms after the kill\n", (long long)(last - killed_ms));
    JT_CHECK(jt_slots_free(&held, hs, N, GUARD_US));
    JT_CHECK(jt_slots_free(&moving, ms, N, GUARD_US));
    /* The dead server's segment is unmapped here although the channel lives. */
    JT_CHECK(ubt_maps_wait_none(30000000));
    /* A server restarted on the same port: the same channel reconnects. */
    char pa[32];
    snprintf(pa, sizeof pa, "port=%d", port);
    const char *args2[] = {"mode=ubring", pa, NULL};
    JT_REQUIRE(jt_child_start(&c, args2, NULL) == 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 300000, 2, "after"), 0);
    JT_CHECK(ubt_maps_count() > 0);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* ---- a killed client ------------------------------------------------------------------- */

/* "role=client port=<p> calls=<n> size=<bytes>": n echoes, exit 0 when all
 * came back byte-exact. */
static int client_role(int argc, char **argv)
{
    int port = 0, calls = 3;
    size_t size = 1000;
    for (int i = 2; i < argc; i++) {
        if (strncmp(argv[i], "port=", 5) == 0) port = atoi(argv[i] + 5);
        if (strncmp(argv[i], "calls=", 6) == 0) calls = atoi(argv[i] + 6);
        if (strncmp(argv[i], "size=", 5) == 0) size = (size_t)atol(argv[i] + 5);
    }
    jet_channel_t *ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 20000, JET_CONNECTION_SINGLE, 0);
    if (!ch) return 4;
    int rc = 0;
    for (int i = 0; i < calls && rc == 0; i++)
        rc = jt_echo_bytes(ch, size, (uint64_t)i * 77, "child");
    jet_channel_destroy(ch);
    return rc == 0 ? 0 : 1;
}

static void test_client_killed(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    char pa[32];
    snprintf(pa, sizeof pa, "port=%d", port);
    /* A dead peer acknowledges no close: its ring goes with the TCP EOF,
     * not after ub_disconnect_timeout (made long here). */
    JT_CHECK_EQ(jet_flag_set("ub_disconnect_timeout", "120"), 0);
    for (int round = 0; round < 2; round++) {
        const char *args[] = {pa, "calls=100000", "size=1048576", NULL};
        pid_t pid = jt_spawn_role("role=client", args, NULL);
        JT_REQUIRE(pid >= 0);
        jet_server_stats_t st;
        JT_CHECK(JT_WAIT_UNTIL(
            (jet_server_get_stats(srv, &st), st.requests > (uint64_t)round * 5 + 5), 20000000));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        JT_CHECK(jt_server_wait_stats(srv, JT_ANY, 0, PROMPT_MS * 1000LL, NULL));
        /* The server let go of the dead client's segment and its own. */
        JT_CHECK(ubt_maps_wait_none(PROMPT_MS * 1000LL));
    }
    JT_CHECK_EQ(jet_flag_set("ub_disconnect_timeout", "5"), 0);
    jet_channel_t *ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 30000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 1 << 20, 3, "survivor"), 0);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* ---- a silent peer ----------------------------------------------------------------------------
 */

/* "role=silent port=<p> pid=<peer pid>" (with the small heartbeat flags):
 * one call over UBRing, then the peer is stopped; the next call must fail
 * with a connection error well before its 60 s deadline. Exit codes: 0 ok,
 * 10 the first call failed, 20 the call succeeded, 21 it timed out, 22 it
 * failed too late, 23 another error. */
/* The thread whose stat file this is shows stopped (state T). */
static bool ubt_thread_stopped(const char *stat_path)
{
    char buf[512];
    FILE *f = fopen(stat_path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')'); /* the command name may hold anything */
    return rp && rp[1] == ' ' && (rp[2] == 'T' || rp[2] == 't');
}

/* Every thread of pid is stopped: /proc/<pid>/stat tells the main thread's
 * state only, and another thread (the peer's are Python threads) may still
 * run for a while after it stopped, and answer. */
static bool ubt_proc_stopped(pid_t pid)
{
    char path[300];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return false;
    bool all = true;
    int seen = 0;
    for (struct dirent *e; all && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/%d/task/%.20s/stat", (int)pid, e->d_name);
        all = ubt_thread_stopped(path);
        seen++;
    }
    closedir(d);
    return all && seen > 0;
}

/* A role's "port=<p> pid=<peer pid>" arguments. */
static void role_port_pid(int argc, char **argv, int *port, pid_t *peer)
{
    *port = 0;
    *peer = 0;
    for (int i = 2; i < argc; i++) {
        if (strncmp(argv[i], "port=", 5) == 0) *port = atoi(argv[i] + 5);
        if (strncmp(argv[i], "pid=", 4) == 0) *peer = (pid_t)atoi(argv[i] + 4);
    }
}

static int silent_role(int argc, char **argv)
{
    int port;
    pid_t peer;
    role_port_pid(argc, argv, &port, &peer);
    jet_channel_t *ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 60000, JET_CONNECTION_SINGLE, 0);
    if (!ch || peer <= 0) return 4;
    if (jt_echo_bytes(ch, 5000, 1, "before") != 0) return 10;
    if (ubt_maps_count() <= 0) return 11;
    kill(peer, SIGSTOP);
    /* SIGSTOP is asynchronous: wait until the peer is really stopped, or it
     * may still answer the next call. */
    if (!JT_WAIT_UNTIL(ubt_proc_stopped(peer), 5000000)) return 12;
    int64_t t0 = jt_now_ms();
    jet_call_t *call = jet_call_create();
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "to-a-stopped-peer";
    jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL);
    int64_t took = jt_now_ms() - t0;
    int rc = 0;
    if (!jet_call_failed(call))
        rc = 20;
    else if (jet_call_error_code(call) == JET_ERPCTIMEDOUT)
        rc = 21;
    else if (took > 30000)
        rc = 22;
    else if (!ubt_connection_error(jet_call_error_code(call)))
        rc = 23;
    fprintf(stderr, "  silent peer: call ended after %lld ms: %d %s\n", (long long)took,
            jet_call_error_code(call), jet_call_error_text(call));
    jet_call_destroy(call);
    kill(peer, SIGCONT);
    jet_channel_destroy(ch);
    return rc;
}

/* "role=stuck port=<p> pid=<peer pid>" (default heartbeat flags, so the
 * connection lives on for seconds): after one call, the peer is stopped and
 * a call with an attachment larger than its ring leaves a writer waiting
 * for room that never comes. Once the call has timed out, this process
 * must not spin a core for the waiting writer. Exit codes: 0 ok, 10 the
 * first call failed, 30 the stuck call did not time out, 31 the process
 * spent more than a quarter of 2 s of CPU. */
static double stuck_cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static int stuck_role(int argc, char **argv)
{
    int port;
    pid_t peer;
    role_port_pid(argc, argv, &port, &peer);
    jet_channel_t *ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 1000, JET_CONNECTION_SINGLE, 0);
    if (!ch || peer <= 0) return 4;
    if (jt_echo_bytes(ch, 5000, 1, "before") != 0) return 10;
    kill(peer, SIGSTOP);
    if (!JT_WAIT_UNTIL(ubt_proc_stopped(peer), 5000000)) return 12;
    int rc = jt_echo_bytes(ch, 5 << 20, 2, "stuck") != 0 ? 0 : 30;
    usleep(200 * 1000);
    double c0 = stuck_cpu_s();
    usleep(2000 * 1000);
    double cpu = stuck_cpu_s() - c0;
    fprintf(stderr, "  a writer waiting on a stopped peer: %.3f s of CPU in 2 s\n", cpu);
    if (rc == 0 && cpu > 0.5) rc = 31;
    kill(peer, SIGCONT);
    jet_channel_destroy(ch);
    return rc;
}

/* A peer that stops reading its ring (stuck, or hostile: it could go on
 * beating) costs a waiting writer's process no CPU beyond a short spin. */
static void test_stuck_peer_costs_no_cpu(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    ubt_peer_t peer;
    const char *args[] = {"--hb-timeout", "0", NULL};
    JT_REQUIRE(ubt_peer_server_start(&peer, args) == 0);
    char pa[32], pi[32];
    snprintf(pa, sizeof pa, "port=%d", peer.port);
    snprintf(pi, sizeof pi, "pid=%d", (int)peer.pid);
    const char *cargs[] = {pa, pi, NULL};
    int rc = jt_run_role("role=stuck", cargs, NULL, 60000);
    kill(peer.pid, SIGCONT);
    JT_CHECK_EQ(rc, 0);
    if (jt_case_failed) ubt_peer_dump(&peer, "case failed");
    JT_CHECK_EQ(ubt_peer_stop(&peer, false), 0);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

static void test_silent_peer_server(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    ubt_peer_t peer;
    const char *args[] = {"--hb-timeout", "0", NULL}; /* the peer itself never gives up */
    JT_REQUIRE(ubt_peer_server_start(&peer, args) == 0);
    char pa[32], pi[32];
    snprintf(pa, sizeof pa, "port=%d", peer.port);
    snprintf(pi, sizeof pi, "pid=%d", (int)peer.pid);
    const char *cargs[] = {pa, pi, small_hb[0], small_hb[1], NULL};
    int rc = jt_run_role("role=silent", cargs, NULL, 90000);
    kill(peer.pid, SIGCONT);
    JT_CHECK_EQ(rc, 0);
    JT_CHECK_EQ(ubt_peer_log_count(&peer, "UBRing ESTABLISHED"), 1);
    if (jt_case_failed) ubt_peer_dump(&peer, "case failed");
    JT_CHECK_EQ(ubt_peer_stop(&peer, false), 0);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* A raw client that never writes a heartbeat: a server with the small
 * heartbeat flags drops it (and only it). */
static void test_silent_raw_client(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    jt_child_t c;
    const char *args[] = {"mode=ubring", small_hb[0], small_hb[1], NULL};
    JT_REQUIRE(jt_child_start(&c, args, NULL) == 0);
    ubt_raw_t r;
    int rc = ubt_raw_connect(&r, c.port, NULL);
    JT_CHECK_EQ(rc, 1);
    if (rc == 1) {
        int64_t t0 = jt_now_ms();
        bool eof = jt_wait_eof(r.fd, 30000);
        JT_CHECK(eof);
        fprintf(stderr, "  silent raw client dropped after %lld ms\n",
                (long long)(jt_now_ms() - t0));
    }
    ubt_raw_close(&r);
    /* A live (beating) client of the same server is kept. */
    jet_channel_t *ch =
        ubt_channel(c.port, JET_SOCKET_MODE_UBRING, 30000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 1000, 1, "alive"), 0);
    usleep(5000000); /* several heartbeat periods */
    JT_CHECK_EQ(jt_echo_bytes(ch, 1000, 2, "alive"), 0);
    jet_channel_destroy(ch);
    JT_CHECK_EQ(jt_child_stop(&c), 0);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* A server started with the flags as they are drops a raw client that
 * never beats within 10 s; its segments go. */
static void silent_raw_client_dropped(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    ubt_raw_t r;
    int rc = ubt_raw_connect(&r, port, NULL);
    JT_CHECK_EQ(rc, 1);
    if (rc == 1) {
        int64_t t0 = jt_now_ms();
        JT_CHECK(jt_wait_eof(r.fd, 10000));
        fprintf(stderr, "  silent raw client dropped after %lld ms\n",
                (long long)(jt_now_ms() - t0));
    }
    ubt_raw_close(&r);
    jet_server_stop(srv);
    jet_server_destroy(srv);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* A negative retry count, stored by code (the flag's range refuses it from
 * the command line), tolerates no miss: the silent raw client is dropped at
 * the first 1 s check. It was cast to a huge count and never dropped. */
static void test_negative_hb_retry_cnt(void)
{
    int32_t old_interval = JET_FLAG(ub_hb_timer_interval), old_retry = JET_FLAG(ub_hb_retry_cnt);
    JET_FLAG_STORE(ub_hb_timer_interval, 1);
    JET_FLAG_STORE(ub_hb_retry_cnt, -1);
    JT_CHECK_EQ(jet_flag_set("ub_hb_retry_cnt", "-1"), -EINVAL);
    silent_raw_client_dropped();
    JET_FLAG_STORE(ub_hb_timer_interval, old_interval);
    JET_FLAG_STORE(ub_hb_retry_cnt, old_retry);
}

/* A tick period stored by code above the flag's range (35 minutes here)
 * is read as its largest, 1 s: heartbeats are still checked, and a silent
 * raw client is dropped within seconds. It was never dropped before. */
static void test_huge_tick_period(void)
{
    int32_t old_interval = JET_FLAG(ub_hb_timer_interval), old_retry = JET_FLAG(ub_hb_retry_cnt),
            old_tick = JET_FLAG(ub_event_queue_timer_interval);
    JET_FLAG_STORE(ub_hb_timer_interval, 1);
    JET_FLAG_STORE(ub_hb_retry_cnt, 0);
    JET_FLAG_STORE(ub_event_queue_timer_interval, INT32_MAX);
    silent_raw_client_dropped();
    JET_FLAG_STORE(ub_hb_timer_interval, old_interval);
    JET_FLAG_STORE(ub_hb_retry_cnt, old_retry);
    JET_FLAG_STORE(ub_event_queue_timer_interval, old_tick);
}

/* The connect timeout the server writes into both segments (a peer reads it
 * as seconds) is within the flag's range [1, 3600] whatever code stored: -1
 * was written as 4294967295 and INT32_MAX as itself. */
static void test_connect_timeout_written_in_range(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int32_t old = JET_FLAG(ub_connect_timeout);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    const struct {
        int32_t stored;
        uint32_t written;
    } cases[] = {{-1, 1}, {0, 1}, {7, 7}, {INT32_MAX, 3600}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        JET_FLAG_STORE(ub_connect_timeout, cases[i].stored);
        ubt_raw_t r;
        int rc = ubt_raw_connect(&r, port, NULL);
        JT_CHECK_EQ(rc, 1);
        if (rc == 1) {
            uint32_t own = __atomic_load_n(ubt_u32(r.own, UBT_OFF_TIMEOUT), __ATOMIC_ACQUIRE);
            uint32_t srv_own = __atomic_load_n(ubt_u32(r.peer, UBT_OFF_TIMEOUT), __ATOMIC_ACQUIRE);
            fprintf(stderr, "  stored %d: written %u and %u\n", cases[i].stored, own, srv_own);
            JT_CHECK_EQ(own, cases[i].written);
            JT_CHECK_EQ(srv_own, cases[i].written);
        }
        ubt_raw_close(&r);
    }
    JET_FLAG_STORE(ub_connect_timeout, old);
    jet_server_stop(srv);
    jet_server_destroy(srv);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* A peer's segment may be sparse (brpc's client only ftruncates it; so
 * does the raw client): the server reserves its pages when it maps it, so
 * that a /dev/shm that fills up later fails the handshake (TCP) instead of
 * ending the server with SIGBUS at its first store into an unbacked page.
 * Seen in the file's blocks: all of them allocated once it is mapped. */
static void test_sparse_peer_segment_reserved(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    ubt_raw_opts_t o = {.keep_name = true};
    ubt_raw_t r;
    int rc = ubt_raw_connect(&r, port, &o);
    JT_CHECK_EQ(rc, 1);
    if (rc == 1) {
        char path[96];
        snprintf(path, sizeof path, "/dev/shm/%s", r.name);
        struct stat st;
        JT_CHECK_EQ(stat(path, &st), 0);
        fprintf(stderr, "  client segment: %lld of %zu bytes allocated\n",
                (long long)st.st_blocks * 512, r.own_len);
        JT_CHECK((size_t)st.st_blocks * 512 >= r.own_len);
    }
    ubt_raw_close(&r);
    jet_server_stop(srv);
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(10000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* ---- messages larger than the ring ------------------------------------------------------------
 */

/* As brpc's writer (UBRING.md §6), a message larger than the ring goes in
 * several write calls: 5 and 9 MiB echoes through 4 MiB rings, on the one
 * UBRing connection, with small calls before and after. */
static void test_larger_than_ring(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 30000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 1000, 1, "before"), 0);
    JT_CHECK(ubt_maps_count() > 0);
    /* (65535 - 1) x 60 = 3932040 bytes is what one write call can take. */
    JT_CHECK_EQ(jt_echo_bytes(ch, 3932040, 2, "one write"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 3932041, 3, "two writes"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 5 << 20, 4, "5 MiB"), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, (9 << 20) + 7, 5, "9 MiB"), 0);
    int err = 0;
    JT_CHECK_EQ(jt_async_batch(ch, 6, 5 << 20, 4099, GUARD_US, &err), 0);
    for (int i = 0; i < 3; i++)
        JT_CHECK_EQ(jt_echo_bytes(ch, 1000 + (size_t)i, 10 + (uint64_t)i, "after"), 0);
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.connections_accepted, 1);
    JT_CHECK(ubt_maps_count() > 0);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* The same before the handshake: the first calls of a new channel wait for
 * it in the write queue; the large one and the small one queued behind it
 * are both answered on the UBRing connection. */
static void test_larger_than_ring_before_handshake(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    jet_channel_t *ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 30000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    jet_call_t *big = jet_call_create(), *small = jet_call_create();
    jt_counter_t done = {0};
    JT_REQUIRE(big && small);
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "first";
    jt_echo_fill(big, 5 << 20, 7);
    jt_echo_fill(small, 1000, 8);
    JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, big, &req.base,
                                 jt_count_done, &done),
                0);
    JT_CHECK_EQ(jet_channel_call(ch, &example__echo_service__descriptor, 0, small, &req.base,
                                 jt_count_done, &done),
                0);
    jet_call_join(big);
    jet_call_join(small);
    JT_CHECK_EQ(atomic_load(&done.n), 2);
    JT_CHECK_EQ(jt_echo_check(big, "first", 5 << 20, 7), 0);
    JT_CHECK_EQ(jt_echo_check(small, "first", 1000, 8), 0);
    JT_CHECK_EQ(jt_echo_bytes(ch, 2000, 9, "after"), 0);
    jet_server_stats_t st;
    jet_server_get_stats(srv, &st);
    JT_CHECK_EQ(st.connections_accepted, 1);
    JT_CHECK(ubt_maps_count() > 0);
    jet_call_destroy(big);
    jet_call_destroy(small);
    jet_channel_destroy(ch);
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* ---- corrupt chunks
 * ------------------------------------------------------------------------------ */

/* One good echo through the raw client's rings: proves the raw client
 * speaks UBRing, so that a dropped connection below means the corruption. */
static bool raw_echo(ubt_raw_t *r, int64_t cid)
{
    uint8_t att[500];
    jt_fill_pattern(att, sizeof att, (uint32_t)cid);
    size_t n, rn = 0;
    uint8_t *req = ubt_request_frame(cid, "raw", att, sizeof att, &n);
    ubt_raw_heartbeat(r);
    bool ok = ubt_raw_write(r, req, n);
    free(req);
    uint8_t *resp = ok ? ubt_raw_read_frame(r, &rn, 10000) : NULL;
    ok = resp && ubt_response_is(resp, rn, cid, "raw", att, sizeof att);
    free(resp);
    return ok;
}

typedef enum corruption {
    C_LEN0,
    C_LEN61,
    C_FLAG7,
    C_CURSOR,
    C_NOT_BAIDU,
    C_TAIL,
    C_COUNT,
} corruption_t;

static const char *const corruption_names[C_COUNT] = {
    "len 0", "len 61", "flag 7", "cursor > len", "bytes that are not baidu_std", "tail > capacity"};

static void corrupt(ubt_raw_t *r, corruption_t k)
{
    uint8_t junk[60];
    memset(junk, 'x', sizeof junk);
    ubt_raw_heartbeat(r);
    switch (k) {
    case C_LEN0:
        ubt_raw_doorbell(r);
        ubt_raw_put_chunk(r, junk, 0, 2, 0);
        break;
    case C_LEN61:
        ubt_raw_doorbell(r);
        ubt_raw_put_chunk(r, junk, 61, 2, 0);
        break;
    case C_FLAG7:
        ubt_raw_doorbell(r);
        ubt_raw_put_chunk(r, junk, 10, 7, 0);
        break;
    case C_CURSOR:
        ubt_raw_doorbell(r);
        ubt_raw_put_chunk(r, junk, 10, 2, 11);
        break;
    case C_NOT_BAIDU:
        ubt_raw_write(r, junk, sizeof junk);
        break;
    case C_TAIL: {
        /* The server's writer reads its free room from this: an index past
         * its capacity, then a request whose answer it must not write. */
        __atomic_store_n(ubt_u32(r->peer, UBT_OFF_TAIL), 0xfffffff0u, __ATOMIC_RELEASE);
        size_t n;
        uint8_t *req = ubt_request_frame(77, "tail", junk, sizeof junk, &n);
        ubt_raw_write(r, req, n);
        free(req);
        break;
    }
    default:
        break;
    }
}

/* The raw client against the reference peer: the tool itself is right. */
static void test_raw_client_with_peer(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    ubt_peer_t peer;
    const char *args[] = {NULL};
    JT_REQUIRE(ubt_peer_server_start(&peer, args) == 0);
    ubt_raw_t r;
    int rc = ubt_raw_connect(&r, peer.port, NULL);
    JT_CHECK_EQ(rc, 1);
    if (rc == 1)
        for (int i = 0; i < 3; i++)
            JT_CHECK(raw_echo(&r, 1 + i));
    ubt_raw_close(&r);
    JT_CHECK(JT_WAIT_UNTIL(ubt_peer_log_count(&peer, "UBRing ESTABLISHED") == 1, 5000000));
    if (jt_case_failed) ubt_peer_dump(&peer, "case failed");
    JT_CHECK_EQ(ubt_peer_stop(&peer, false), 0);
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* A client that writes requests into the ring and closes its TCP connection
 * at once, without the ring's close protocol: the server still gets every
 * request written before the close, as TCP delivers the bytes before its
 * EOF. The server's loop is idle first, so that it sees the EOF before it
 * next looks at the ring. */
static void test_requests_before_tcp_close(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    for (int round = 0; round < 3; round++) {
        ubt_raw_t r;
        JT_REQUIRE(ubt_raw_connect(&r, port, NULL) == 1);
        JT_CHECK(raw_echo(&r, 1));
        usleep(50 * 1000); /* past ub_poller_idle_us: the loop stops spinning */
        jet_server_stats_t st0, st;
        jet_server_get_stats(srv, &st0);
        enum { N = 20 };
        for (int i = 0; i < N; i++) {
            size_t n;
            uint8_t *req = ubt_request_frame(100 + i, "before-close", NULL, 0, &n);
            JT_CHECK(ubt_raw_write(&r, req, n));
            free(req);
        }
        shutdown(r.fd, SHUT_RDWR);
        JT_CHECK(JT_WAIT_UNTIL((jet_server_get_stats(srv, &st), st.requests >= st0.requests + N),
                               5000000));
        JT_CHECK_EQ(st.requests - st0.requests, N);
        ubt_raw_close(&r);
    }
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, NULL));
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* ---- the close protocol ------------------------------------------------------------------ */

/* UBRING.md §8, both directions, with and without acknowledgement. The
 * server runs in this process, so ubt_maps_count() shows its two mappings
 * next to the raw client's two. */
enum { RAW_MAPS = 2 };

typedef struct ring_flags {
    uint32_t own_tx, own_rx; /* the raw client's segment */
    uint32_t srv_tx, srv_rx; /* the server's */
} ring_flags_t;

static ring_flags_t raw_flags(ubt_raw_t *r)
{
    ring_flags_t f;
    f.own_tx = __atomic_load_n(ubt_u32(r->own, UBT_OFF_TX_FLAG), __ATOMIC_ACQUIRE);
    f.own_rx = __atomic_load_n(ubt_u32(r->own, UBT_OFF_RX_FLAG), __ATOMIC_ACQUIRE);
    f.srv_tx = __atomic_load_n(ubt_u32(r->peer, UBT_OFF_TX_FLAG), __ATOMIC_ACQUIRE);
    f.srv_rx = __atomic_load_n(ubt_u32(r->peer, UBT_OFF_RX_FLAG), __ATOMIC_ACQUIRE);
    fprintf(stderr, "  flags: client Tx %u Rx %u, server Tx %u Rx %u\n", f.own_tx, f.own_rx,
            f.srv_tx, f.srv_rx);
    return f;
}

static uint32_t raw_own_rx(ubt_raw_t *r)
{
    return __atomic_load_n(ubt_u32(r->own, UBT_OFF_RX_FLAG), __ATOMIC_ACQUIRE);
}

/* (a) The raw client closes: the server acknowledges within 1 s and lets go
 * of both segments. */
static void close_by_client(int port)
{
    ubt_raw_t r;
    int rc = ubt_raw_connect(&r, port, NULL);
    JT_CHECK_EQ(rc, 1);
    if (rc != 1) {
        ubt_raw_close(&r);
        return;
    }
    JT_CHECK(raw_echo(&r, 1));
    JT_CHECK_EQ(ubt_maps_count(), 2 * RAW_MAPS);
    /* Active steps 1 and 3, as ubt_raw_close writes them. */
    __atomic_store_n(ubt_u32(r.peer, UBT_OFF_TX_FLAG), 2, __ATOMIC_RELEASE);
    __atomic_store_n(ubt_u32(r.peer, UBT_OFF_RX_FLAG), 3, __ATOMIC_RELEASE);
    int64_t t0 = jt_now_ms();
    JT_CHECK(JT_WAIT_UNTIL(raw_own_rx(&r) == 3, 1000000));
    fprintf(stderr, "  the server acknowledged after %lld ms\n", (long long)(jt_now_ms() - t0));
    ring_flags_t f = raw_flags(&r);
    JT_CHECK_EQ(f.own_rx, 3); /* the acknowledgement (passive step 3) */
    JT_CHECK_EQ(f.srv_tx, 3); /* its sending direction closed (passive step 2) */
    JT_CHECK(JT_WAIT_EVERY(ubt_maps_count() == RAW_MAPS, 2000000, 1000));
    JT_CHECK(ubt_raw_close(&r)); /* the acknowledgement is there */
    JT_CHECK(ubt_maps_wait_none(2000000));
    /* Through ubt_raw_close itself. */
    rc = ubt_raw_connect(&r, port, NULL);
    JT_CHECK_EQ(rc, 1);
    if (rc == 1) JT_CHECK(raw_echo(&r, 2));
    JT_CHECK(ubt_raw_close(&r));
    JT_CHECK(ubt_maps_wait_none(2000000));
}

/* (b) The server closes the connection (idle_timeout_sec or
 * jet_server_stop): active steps 1-3 show in the raw client's segment and
 * the server's (client Tx CLOSING, client Rx CLOSED, server Tx CLOSED).
 * ack: the raw client acknowledges as a passive brpc side does (its own Tx
 * and the server's Rx CLOSED) and the server unmaps at once, far before
 * ub_disconnect_timeout. Silent: the server unmaps after
 * ub_disconnect_timeout. Either way it waited for the acknowledgement. */
static void close_by_server(ubt_raw_t *r, bool ack, int disconnect_s)
{
    JT_CHECK(JT_WAIT_UNTIL(raw_own_rx(r) == 3, 10000000));
    int64_t t0 = jt_now_ms();
    ring_flags_t f = raw_flags(r);
    JT_CHECK_EQ(f.own_tx, 2); /* active step 1: CLOSING */
    JT_CHECK_EQ(f.own_rx, 3); /* step 3: CLOSED */
    JT_CHECK_EQ(f.srv_tx, 3); /* step 2: its own Tx, CONNECTED before, CLOSED */
    JT_CHECK_EQ(f.srv_rx, 1); /* not acknowledged yet */
    usleep(300000);
    JT_CHECK_EQ(ubt_maps_count(), 2 * RAW_MAPS); /* it waits for the acknowledgement */
    if (ack) {
        __atomic_store_n(ubt_u32(r->own, UBT_OFF_TX_FLAG), 3, __ATOMIC_RELEASE);
        __atomic_store_n(ubt_u32(r->peer, UBT_OFF_RX_FLAG), 3, __ATOMIC_RELEASE);
        int64_t t1 = jt_now_ms();
        JT_CHECK(JT_WAIT_EVERY(ubt_maps_count() == RAW_MAPS, 2000000, 1000));
        fprintf(stderr, "  the server unmapped %lld ms after the acknowledgement\n",
                (long long)(jt_now_ms() - t1));
    } else {
        int64_t guard_ms = disconnect_s * 1000 + 3000;
        JT_CHECK(JT_WAIT_EVERY(ubt_maps_count() == RAW_MAPS, (guard_ms - (jt_now_ms() - t0)) * 1000,
                               1000));
        int64_t waited = jt_now_ms() - t0;
        fprintf(stderr, "  the server unmapped %lld ms after its close, unacknowledged\n",
                (long long)waited);
        /* Not before ub_disconnect_timeout (t0 is when its close was seen
         * here, a little after it began to wait). */
        JT_CHECK(waited >= disconnect_s * 1000 - 300);
        JT_CHECK_EQ(raw_own_rx(r), 3);
    }
}

static void test_close_protocol(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int32_t old_disconnect = JET_FLAG(ub_disconnect_timeout);
    jt_echo_opts_t eo = {.sleep_async = true};
    jt_echo_service_init(&ubt_svc, &eo);
    jet_server_options_t so;
    jet_server_options_init(&so);
    so.socket_mode = JET_SOCKET_MODE_UBRING;
    so.idle_timeout_sec = 1;
    int port = 0;
    jet_server_t *srv = jt_echo_server_start_port(&ubt_svc, 0, &so, &port);
    JT_REQUIRE(srv);

    fprintf(stderr, "  (a) the client closes\n");
    close_by_client(port);

    /* A long timeout: an unmap within 2 s is the acknowledgement's doing. */
    fprintf(stderr, "  (b) the server closes an idle connection, acknowledged\n");
    JT_CHECK_EQ(jet_flag_set("ub_disconnect_timeout", "30"), 0);
    ubt_raw_t r;
    int rc = ubt_raw_connect(&r, port, NULL);
    JT_CHECK_EQ(rc, 1);
    if (rc == 1) close_by_server(&r, true, 30);
    ubt_raw_close(&r);
    JT_CHECK(ubt_maps_wait_none(2000000));

    fprintf(stderr, "  (b) the server closes an idle connection, unacknowledged\n");
    JT_CHECK_EQ(jet_flag_set("ub_disconnect_timeout", "2"), 0);
    rc = ubt_raw_connect(&r, port, NULL);
    JT_CHECK_EQ(rc, 1);
    if (rc == 1) close_by_server(&r, false, 2);
    JT_CHECK(ubt_shm_wait_clean(&before, 1000000));
    ubt_raw_close(&r);
    JT_CHECK(ubt_maps_wait_none(2000000));
    jet_server_destroy(srv);

    fprintf(stderr, "  (b) jet_server_stop, unacknowledged\n");
    srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_CHECK(srv);
    if (!srv) goto out;
    rc = ubt_raw_connect(&r, port, NULL);
    JT_CHECK_EQ(rc, 1);
    if (rc == 1) {
        JT_CHECK(raw_echo(&r, 3));
        JT_CHECK_EQ(jet_server_stop(srv), 0);
        close_by_server(&r, false, 2);
    }
    JT_CHECK(ubt_shm_wait_clean(&before, 1000000));
    ubt_raw_close(&r);
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(2000000));

    /* ubt_raw_close reports a close nobody acknowledged: the server
     * process is stopped. */
    fprintf(stderr, "  a stopped server acknowledges nothing\n");
    jt_child_t c;
    const char *args[] = {"mode=ubring", NULL};
    int started = jt_child_start(&c, args, NULL);
    JT_CHECK_EQ(started, 0);
    if (started != 0) goto out;
    rc = ubt_raw_connect(&r, c.port, NULL);
    JT_CHECK_EQ(rc, 1);
    if (rc == 1) JT_CHECK(raw_echo(&r, 4));
    kill(c.pid, SIGSTOP);
    JT_CHECK(JT_WAIT_UNTIL(ubt_proc_stopped(c.pid), 5000000));
    JT_CHECK(!ubt_raw_close(&r));
    kill(c.pid, SIGCONT);
    JT_CHECK_EQ(jt_child_stop(&c), 0);

out:;
    char old[16];
    snprintf(old, sizeof old, "%d", (int)old_disconnect);
    JT_CHECK_EQ(jet_flag_set("ub_disconnect_timeout", old), 0);
    JT_CHECK(ubt_maps_wait_none(2000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

static void test_corrupt_chunks(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    /* A good channel that lives through all of it. */
    jet_channel_t *good =
        ubt_channel(port, JET_SOCKET_MODE_UBRING, 30000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(good);
    JT_CHECK_EQ(jt_echo_bytes(good, 1000, 1, "good"), 0);
    int base = ubt_maps_count(); /* the good connection's, on both sides */
    JT_CHECK(base > 0);
    for (int k = 0; k < C_COUNT; k++) {
        ubt_raw_t r;
        int rc = ubt_raw_connect(&r, port, NULL);
        JT_CHECK_AT(corruption_names[k], rc == 1);
        if (rc != 1) {
            ubt_raw_close(&r);
            continue;
        }
        JT_CHECK_AT(corruption_names[k], raw_echo(&r, 10 + k));
        JT_CHECK_AT(corruption_names[k], raw_echo(&r, 20 + k));
        corrupt(&r, (corruption_t)k);
        /* Dropped long before any heartbeat would miss (55 s by default). */
        bool eof = jt_wait_eof(r.fd, PROMPT_MS);
        JT_CHECK_AT(corruption_names[k], eof);
        ubt_raw_close(&r);
        JT_CHECK_AT(corruption_names[k],
                    jt_echo_bytes(good, 20000, 100 + (uint64_t)k, "good") == 0);
    }
    /* The server mapped nothing of the dropped connections any more: only
     * the good channel's segments remain. */
    JT_CHECK(JT_WAIT_EVERY(ubt_maps_count() == base, 30000000, 20000));
    jet_channel_destroy(good);
    jet_server_stats_t st;
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, &st));
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* ---- bad hellos
 * ------------------------------------------------------------------------------------ */

typedef struct bad_hello {
    const char *what;
    ubt_raw_opts_t o;
} bad_hello_t;

static void test_bad_hellos(void)
{
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    static const char long_name[] = "UBRING_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_C"; /* 50 */
    const bad_hello_t cases[] = {
        {"msg_len 32", {.msg_len = 32}},
        {"msg_len 1", {.msg_len = 1}},
        {"no such segment", {.no_segment = true}},
        {"segment smaller than announced", {.announce_len = 8u << 20}},
        {"announced length not a multiple of 4 MiB", {.announce_len = (4u << 20) - 64}},
        {"announced length absurd", {.announce_len = UINT64_MAX}},
        {"name without NUL", {.name = long_name, .no_segment = true}},
        /* It exists and has the right size, but is not named as a client's
         * segment: the server must not map (and write into) it. */
        {"a segment not named as a client's", {.name = "jetrpc_test_segment"}},
        {"a server's segment name", {.name = "UBRING_127.0.0.1:1_S"}},
        /* Named and sized as it should be, but another user's: that user
         * could shrink it under the mapping at any time, and the server's
         * next store into it (a heartbeat within a second) would end the
         * server with SIGBUS. */
        {"a segment of another user", {.owner = 65534}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ubt_raw_t r;
        int rc = ubt_raw_connect(&r, port, &cases[i].o);
        if (rc == -3) {
            fprintf(stderr, "  %s: skipped (not root)\n", cases[i].what);
            ubt_raw_close(&r);
            continue;
        }
        /* Refused: closed (-1) or declined (0) - never UBRing, never a hang. */
        JT_CHECK_AT(cases[i].what, rc == -1 || rc == 0);
        if (rc == 0) {
            JT_CHECK_AT(cases[i].what, ubt_hello_is_unnegotiable(r.reply));
            JT_CHECK_AT(cases[i].what, ubt_expect_tcp_after_ack0(r.fd, cases[i].what));
        }
        ubt_raw_close(&r);
        JT_CHECK_AT(cases[i].what, ubt_maps_wait_none(20000000));
        JT_CHECK_AT(cases[i].what, ubt_shm_wait_clean(&before, 10000000));
    }
    /* The server goes on serving UBRing. */
    jet_channel_t *ch = ubt_channel(port, JET_SOCKET_MODE_UBRING, 30000, JET_CONNECTION_SINGLE, 0);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(jt_echo_bytes(ch, 100000, 1, "after"), 0);
    JT_CHECK(ubt_maps_count() > 0);
    jet_channel_destroy(ch);
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, NULL));
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* A raw client that writes requests and reads no answers: once its ring is
 * full and more than socket_max_unwritten_bytes (256 KiB here) of answers
 * wait, the server stops taking requests and stops reading the client's
 * ring, so what the client writes next stays there: the server holds a
 * bounded number of requests, not all it is sent. When the client reads,
 * every answer comes, in order, and the rest of the requests are served. */
static void test_unread_answers_bounded(void)
{
    enum { N = 400, MORE = 100, ANSWER = 64 << 10 };
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    ubt_raw_t r;
    JT_REQUIRE(ubt_raw_connect(&r, port, NULL) == 1);
    char old[32];
    snprintf(old, sizeof old, "%lld", (long long)JET_FLAG(socket_max_unwritten_bytes));
    JT_CHECK_EQ(jet_flag_set("socket_max_unwritten_bytes", "262144"), 0);
    jet_server_stats_t st0, st;
    jet_server_get_stats(srv, &st0);
    char msg[32];
    snprintf(msg, sizeof msg, "big:%d", ANSWER);
    for (int i = 0; i < N + MORE; i++) {
        size_t n;
        uint8_t *req = ubt_request_frame(1000 + i, msg, NULL, 0, &n);
        JT_CHECK(ubt_raw_write(&r, req, n)); /* small requests: the ring holds them */
        free(req);
        if (i + 1 != N) continue;
        /* The first N: the server takes requests until the answers back up. */
        uint64_t taken = 0;
        for (int quiet = 0; quiet < 5;) {
            usleep(100000);
            ubt_raw_heartbeat(&r);
            jet_server_get_stats(srv, &st);
            quiet = st.requests - st0.requests == taken ? quiet + 1 : 0;
            taken = st.requests - st0.requests;
        }
        fprintf(stderr, "  requests taken while no answer was read: %llu of %d\n",
                (unsigned long long)taken, N);
        /* Our ring (4 MiB) holds some answers besides the limit; without
         * the pause the server takes all 400 (25 MiB). */
        JT_CHECK(taken < N / 2);
    }
    /* The next MORE stay in the ring: the server does not read it now. */
    usleep(300000);
    uint32_t unread = r.peer_cap - 1 - ubt_raw_free(&r);
    fprintf(stderr, "  chunks of the last %d requests left in the ring: %u\n", MORE, unread);
    JT_CHECK(unread >= MORE);
    int ok = 0;
    for (int i = 0; i < N + MORE; i++) {
        size_t len;
        uint8_t *f = ubt_raw_read_frame(&r, &len, 10000);
        bool good = f && jt_big_answer_ok(f, len, 1000 + i, ANSWER);
        free(f);
        if (!good) break;
        ok++;
    }
    JT_CHECK_EQ(ok, N + MORE);
    JT_CHECK_EQ(jet_flag_set("socket_max_unwritten_bytes", old), 0);
    ubt_raw_close(&r);
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, NULL));
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

/* A peer whose tail claims room its unread chunks still fill (a stale,
 * torn or hostile value within the capacity): the server's writer, waiting
 * with an answer larger than the ring, must not take the claim for room
 * and retry for good. Once the tail is right again, the answer arrives
 * whole. */
static void test_lying_tail_costs_no_cpu(void)
{
    enum { ANSWER = 6 << 20 };
    ubt_names_t before;
    ubt_shm_list(&before);
    int port = 0;
    jet_server_t *srv = ubt_server_start(JET_SOCKET_MODE_UBRING, 0, &port);
    JT_REQUIRE(srv);
    ubt_raw_t r;
    JT_REQUIRE(ubt_raw_connect(&r, port, NULL) == 1);
    JT_CHECK(raw_echo(&r, 1));
    char msg[32];
    snprintf(msg, sizeof msg, "big:%d", ANSWER);
    size_t n;
    uint8_t *req = ubt_request_frame(2, msg, NULL, 0, &n);
    JT_CHECK(ubt_raw_write(&r, req, n));
    free(req);
    /* The answer fills our ring: every slot but the one before our read
     * position holds an unread chunk. */
    uint32_t cap = r.own_cap, before_r = (r.r + cap - 1) % cap;
    uint8_t *flags = r.own + UBT_OFF_DATAQ + 60;
    JT_CHECK(JT_WAIT_UNTIL(__atomic_load_n(flags + (size_t)((before_r + cap - 1) % cap) * UBT_CHUNK,
                                           __ATOMIC_ACQUIRE) != 0,
                           10000000));
    volatile uint32_t *tail = ubt_u32(r.peer, UBT_OFF_TAIL);
    uint32_t real = __atomic_load_n(tail, __ATOMIC_ACQUIRE);
    JT_CHECK_EQ(real, before_r);
    __atomic_store_n(tail, (real + cap / 2) % cap, __ATOMIC_RELEASE);
    usleep(200 * 1000);
    double c0 = stuck_cpu_s();
    for (int i = 0; i < 20; i++) {
        ubt_raw_heartbeat(&r);
        usleep(100 * 1000);
    }
    double cpu = stuck_cpu_s() - c0;
    fprintf(stderr, "  a writer facing a tail ahead of the unread chunks: %.3f s of CPU in 2 s\n",
            cpu);
    JT_CHECK(cpu < 0.5);
    __atomic_store_n(tail, real, __ATOMIC_RELEASE);
    size_t len = 0;
    uint8_t *f = ubt_raw_read_frame(&r, &len, 10000);
    JT_CHECK(f && jt_big_answer_ok(f, len, 2, ANSWER));
    free(f);
    JT_CHECK(raw_echo(&r, 3));
    ubt_raw_close(&r);
    JT_CHECK(jt_server_wait_stats(srv, 0, 0, 20000000, NULL));
    jet_server_destroy(srv);
    JT_CHECK(ubt_maps_wait_none(30000000));
    JT_CHECK(ubt_shm_wait_clean(&before, 10000000));
}

int main(int argc, char **argv)
{
    ubt_main_setup(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "role=server") == 0) return ubt_server_role(argc, argv);
    if (argc > 1 && strcmp(argv[1], "role=client") == 0) return client_role(argc, argv);
    if (argc > 1 && strcmp(argv[1], "role=silent") == 0) return silent_role(argc, argv);
    if (argc > 1 && strcmp(argv[1], "role=stuck") == 0) return stuck_role(argc, argv);
    JT_RUN(test_raw_client_with_peer);
    JT_RUN(test_server_killed);
    JT_RUN(test_client_killed);
    JT_RUN(test_silent_peer_server);
    JT_RUN(test_silent_raw_client);
    JT_RUN(test_negative_hb_retry_cnt);
    JT_RUN(test_huge_tick_period);
    JT_RUN(test_connect_timeout_written_in_range);
    JT_RUN(test_sparse_peer_segment_reserved);
    JT_RUN(test_stuck_peer_costs_no_cpu);
    JT_RUN(test_lying_tail_costs_no_cpu);
    JT_RUN(test_larger_than_ring);
    JT_RUN(test_larger_than_ring_before_handshake);
    JT_RUN(test_corrupt_chunks);
    JT_RUN(test_bad_hellos);
    JT_RUN(test_requests_before_tcp_close);
    JT_RUN(test_close_protocol);
    JT_RUN(test_unread_answers_bounded);
    return jt_finish();
}
