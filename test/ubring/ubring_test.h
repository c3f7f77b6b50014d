/* Helpers shared by the UBRing multi-process tests (header only: each test
 * file is its own executable).
 *
 * - Server children (testutil_transport's jt_child_*): the test binary
 *   re-executed with "role=server" (and "mode=<m>", "port=<p>", flag
 *   arguments) serves the echo service of testutil_rpc.
 * - The reference peer (UBRING_PEER, a Python script) as a child process,
 *   its log in a temporary file.
 * - Evidence that bytes really went over UBRing: the peer's "UBRing
 *   ESTABLISHED" log line, and /dev/shm/UBRING_* mappings in
 *   /proc/self/maps (the names are unlinked once established, the mappings
 *   stay until the connection is gone).
 * - Leak checks: UBRING_* names in /dev/shm that were not there before.
 * - A raw UBRing client written from UBRING.md alone (not from the
 *   implementation), to send bad hellos and corrupt chunks.
 *
 * Every wait is bounded; bounds are guards, never timing assertions. */
#ifndef JET_TEST_UBRING_TEST_H
#define JET_TEST_UBRING_TEST_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"
#include "testutil.h"
#include "testutil_rpc.h"
#include "testutil_transport.h"

#define UBT_UNUSED __attribute__((unused))

/* ---- process set-up --------------------------------------------------------- */

/* Call first in main (before any channel or server): parses flag arguments. */
static UBT_UNUSED void ubt_main_setup(int *argc, char ***argv)
{
    jt_self_init();
    if (jet_flags_parse(argc, argv) < 0) exit(2);
}

/* ---- echo servers ------------------------------------------------------------- */

static UBT_UNUSED jt_echo_service_t ubt_svc;

/* An in-process echo server (sleep:<ms> answered from a thread) on
 * 127.0.0.1:port (0: a free one, written to *port_p). */
static UBT_UNUSED jet_server_t *ubt_server_start(jet_socket_mode_t mode, int port, int *port_p)
{
    jt_echo_opts_t eo = {.sleep_async = true};
    jt_echo_service_init(&ubt_svc, &eo);
    jet_server_options_t so;
    jet_server_options_init(&so);
    so.socket_mode = mode;
    return jt_echo_server_start_port(&ubt_svc, port, &so, port_p);
}

/* The "role=server [mode=<m>] [port=<p>]" entry. */
static UBT_UNUSED int ubt_server_role(int argc, char **argv)
{
    jet_socket_mode_t mode = JET_SOCKET_MODE_UBRING;
    int port = 0;
    for (int i = 2; i < argc; i++) {
        if (strncmp(argv[i], "mode=", 5) == 0 && jet_socket_mode_parse(argv[i] + 5, &mode) < 0)
            return 3;
        if (strncmp(argv[i], "port=", 5) == 0) port = atoi(argv[i] + 5);
    }
    jet_server_t *srv = ubt_server_start(mode, port, &port);
    if (!srv) return 4;
    return jt_serve_until_stdin_closes(srv, port);
}

/* ---- channels and echo calls ----------------------------------------------------- */

static UBT_UNUSED jet_channel_t *ubt_channel(int port, jet_socket_mode_t mode, int32_t timeout_ms,
                                             jet_connection_type_t type, int32_t max_retry)
{
    jet_channel_options_t o;
    jet_channel_options_init(&o);
    o.socket_mode = mode;
    o.timeout_ms = timeout_ms;
    o.connect_timeout_ms = timeout_ms < 10000 ? timeout_ms : 10000;
    o.connection_type = type;
    if (max_retry >= 0) o.max_retry = max_retry;
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    jet_channel_t *ch = NULL;
    if (jet_channel_create(addr, &o, &ch) < 0) return NULL;
    return ch;
}

/* Codes a connection failure may give a call (never its deadline). */
static UBT_UNUSED bool ubt_connection_error(int code)
{
    return code == JET_EEOF || code == EIO || code == JET_EFAILEDSOCKET || code == ECONNRESET ||
           code == ECONNREFUSED || code == EPIPE || code == EPROTO || code == ETIMEDOUT ||
           code == ECONNABORTED || code == ENOTCONN;
}

/* ---- evidence of UBRing and leak checks ----------------------------------------------- */

/* Lines of /proc/self/maps that map a UBRING_* shared-memory segment. */
static UBT_UNUSED int ubt_maps_count(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "/dev/shm/UBRING_")) n++;
    fclose(f);
    return n;
}

/* Waits until no UBRING_ segment is mapped in this process. */
static UBT_UNUSED bool ubt_maps_wait_none(int64_t guard_us)
{
    bool ok = JT_WAIT_EVERY(ubt_maps_count() == 0, guard_us, 20000);
    if (!ok) {
        FILE *f = fopen("/proc/self/maps", "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f))
            if (strstr(line, "/dev/shm/UBRING_")) fprintf(stderr, "  still mapped: %s", line);
        if (f) fclose(f);
    }
    return ok;
}

#define UBT_MAX_NAMES 256

typedef struct ubt_names {
    int n;
    char name[UBT_MAX_NAMES][64];
} ubt_names_t;

/* The UBRING_* names in /dev/shm. */
static UBT_UNUSED void ubt_shm_list(ubt_names_t *out)
{
    out->n = 0;
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) && out->n < UBT_MAX_NAMES) {
        size_t len = strlen(e->d_name);
        if (strncmp(e->d_name, "UBRING_", 7) != 0 || len >= sizeof out->name[0]) continue;
        memcpy(out->name[out->n++], e->d_name, len + 1);
    }
    closedir(d);
}

static UBT_UNUSED int ubt_shm_new_count(const ubt_names_t *before, bool print)
{
    ubt_names_t now;
    ubt_shm_list(&now);
    int fresh = 0;
    for (int i = 0; i < now.n; i++) {
        bool old = false;
        for (int j = 0; j < before->n && !old; j++)
            old = strcmp(now.name[i], before->name[j]) == 0;
        if (old) continue;
        fresh++;
        if (print) fprintf(stderr, "  left in /dev/shm: %s\n", now.name[i]);
    }
    return fresh;
}

/* true when every UBRING_* name that appeared since before is gone again
 * within guard_us (names still being set up are unlinked within moments). */
static UBT_UNUSED bool ubt_shm_wait_clean(const ubt_names_t *before, int64_t guard_us)
{
    if (JT_WAIT_EVERY(ubt_shm_new_count(before, false) == 0, guard_us, 20000)) return true;
    ubt_shm_new_count(before, true);
    return false;
}

/* ---- the reference peer ---------------------------------------------------------------- */

typedef struct ubt_peer {
    pid_t pid;
    int port;
    char log[128];
} ubt_peer_t;

/* Path of ubring_peer.py: UBRING_PEER, else JET_SHARED_DIR/tools/. */
static UBT_UNUSED const char *ubt_peer_path(void)
{
    const char *p = getenv("UBRING_PEER");
    if (p && *p) return p;
    return jt_shared_path("tools/ubring_peer.py");
}

/* Bytes of the peer's log (stdout and stderr), malloc'd and NUL-terminated. */
static UBT_UNUSED char *ubt_peer_log(const ubt_peer_t *p)
{
    size_t n = 0;
    char *s = jt_read_file(p->log, &n);
    char *z = malloc(n + 1);
    if (!z) abort();
    if (s) memcpy(z, s, n);
    z[n] = 0;
    free(s);
    return z;
}

/* How often needle occurs in the peer's log. */
static UBT_UNUSED int ubt_peer_log_count(const ubt_peer_t *p, const char *needle)
{
    char *s = ubt_peer_log(p);
    int n = 0;
    for (const char *q = s; (q = strstr(q, needle)); q += strlen(needle))
        n++;
    free(s);
    return n;
}

static UBT_UNUSED void ubt_peer_dump(const ubt_peer_t *p, const char *why)
{
    char *s = ubt_peer_log(p);
    size_t n = strlen(s);
    fprintf(stderr, "  --- peer log (%s), last bytes:\n%s\n  ---\n", why,
            n > 3000 ? s + n - 3000 : s);
    free(s);
}

/* Runs "python3 ubring_peer.py <args...>" with its output in p->log. */
static UBT_UNUSED int ubt_peer_spawn(ubt_peer_t *p, const char *const *args)
{
    const char *script = ubt_peer_path();
    if (access(script, R_OK) != 0) {
        fprintf(stderr, "  reference peer %s: %s\n", script, strerror(errno));
        return -1;
    }
    static int seq;
    snprintf(p->log, sizeof p->log, "/tmp/ubt-peer-%d-%d.log", (int)getpid(), ++seq);
    int fd = open(p->log, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    const char *argv[40];
    int n = 0;
    argv[n++] = "python3";
    argv[n++] = script;
    for (int i = 0; args[i] && n < 39; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(fd);
        return -1;
    }
    if (pid == 0) {
        /* A process group of its own: a stopped peer (the faults cases stop
         * it) in the test's group gets SIGHUP and SIGCONT from the kernel
         * when that group is orphaned (the suite run from a shell that has
         * gone), and it answered then, "stopped" as it was. */
        setpgid(0, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0) dup2(nul, 0);
        execvp("python3", (char *const *)argv);
        dprintf(2, "exec python3: %s\n", strerror(errno));
        _exit(127);
    }
    close(fd);
    p->pid = pid;
    return 0;
}

/* Starts the peer as a server on a free port with extra args; waits until it
 * listens. 0, or -1 (nothing left running). */
static UBT_UNUSED int ubt_peer_server_start(ubt_peer_t *p, const char *const *extra)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        p->port = jt_tcp_free_port();
        char port[16];
        snprintf(port, sizeof port, "%d", p->port);
        const char *args[32] = {"server", "--port", port};
        int n = 3;
        for (int i = 0; extra && extra[i] && n < 31; i++)
            args[n++] = extra[i];
        args[n] = NULL;
        if (ubt_peer_spawn(p, args) < 0) return -1;
        int64_t end = jt_now_ms() + 20000;
        bool up = false, dead = false;
        while (!up && !dead && jt_now_ms() < end) {
            up = ubt_peer_log_count(p, "listening on") > 0;
            if (!up) {
                dead = waitpid(p->pid, NULL, WNOHANG) == p->pid;
                usleep(20000);
            }
        }
        if (up) return 0;
        ubt_peer_dump(p, "did not listen");
        if (!dead) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, NULL, 0);
        }
        unlink(p->log);
    }
    return -1;
}

/* Stops the peer (SIGTERM, then SIGKILL after 10 s); removes its log unless
 * keep_log. Its exit status (128+signal when it had to be killed). */
static UBT_UNUSED int ubt_peer_stop(ubt_peer_t *p, bool keep_log)
{
    kill(p->pid, SIGCONT);
    kill(p->pid, SIGTERM);
    int64_t end = jt_now_ms() + 10000;
    int st = 0;
    while (waitpid(p->pid, &st, WNOHANG) == 0) {
        if (jt_now_ms() > end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            break;
        }
        usleep(5000);
    }
    if (!keep_log) unlink(p->log);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Waits for the peer process to exit by itself: its exit status, -1 after
 * guard_ms (then killed). */
static UBT_UNUSED int ubt_peer_wait(ubt_peer_t *p, int guard_ms)
{
    int64_t end = jt_now_ms() + guard_ms;
    int st = 0;
    while (waitpid(p->pid, &st, WNOHANG) == 0) {
        if (jt_now_ms() > end) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- baidu_std over a raw byte stream -------------------------------------------------------- */

/* A whole Echo request frame (message msg, attachment att) with
 * correlation id cid: malloc'd bytes, length in *len_p. */
static UBT_UNUSED uint8_t *ubt_request_frame(int64_t cid, const char *msg, const void *att,
                                             size_t alen, size_t *len_p)
{
    jt_bytes_t b = {0};
    jt_bytes_echo_request(&b, cid, msg, att, alen);
    *len_p = b.len;
    return b.p;
}

/* Checks that p[0..n) is exactly one response frame for cid whose message is
 * msg and attachment att[0..alen). */
static UBT_UNUSED bool ubt_response_is(const uint8_t *p, size_t n, int64_t cid, const char *msg,
                                       const void *att, size_t alen)
{
    jet_baidu_frame_t f;
    jet__baidu_frame_init(&f);
    bool ok = jt_frame_decode(p, n, &f);
    char *got = NULL;
    if (ok) ok = f.meta->has_correlation_id && f.meta->correlation_id == cid;
    if (ok)
        ok = !f.meta->response || !f.meta->response->has_error_code ||
             f.meta->response->error_code == 0;
    if (ok) ok = (got = jt_frame_echo_message(&f, false)) && strcmp(got, msg) == 0;
    if (ok) ok = jet_iobuf_len(&f.attachment) == alen;
    if (ok && alen) {
        uint8_t *q = malloc(alen);
        if (!q) abort();
        jet_iobuf_copy_to(&f.attachment, q, alen, 0);
        ok = memcmp(q, att, alen) == 0;
        free(q);
    }
    if (!ok)
        fprintf(stderr, "  response of %zu bytes is not the echo (message '%s')\n", n,
                got ? got : "?");
    free(got);
    jet__baidu_frame_fini(&f);
    return ok;
}

/* Reads one whole baidu_std frame from fd (bounded): malloc'd, or NULL. */
static UBT_UNUSED uint8_t *ubt_read_frame_fd(int fd, size_t *len_p, int timeout_ms)
{
    uint8_t h[12];
    if (jt_read_n(fd, h, 12, timeout_ms) != 12 || memcmp(h, "PRPC", 4) != 0) return NULL;
    uint32_t body = jt_get_be32(h + 4);
    if (body > (64u << 20)) return NULL;
    uint8_t *p = malloc(12 + (size_t)body);
    if (!p) abort();
    memcpy(p, h, 12);
    if (jt_read_n(fd, p + 12, body, timeout_ms) != body) {
        free(p);
        return NULL;
    }
    *len_p = 12 + (size_t)body;
    return p;
}

/* After an un-negotiable hello and our ACK 0 the connection speaks
 * baidu_std: two requests on fd, two byte-exact echoes. */
static UBT_UNUSED bool ubt_expect_tcp_after_ack0(int fd, const char *label)
{
    for (int k = 0; k < 2; k++) {
        uint8_t att[300];
        jt_fill_pattern(att, sizeof att, (uint32_t)k + 1);
        size_t n, rn = 0;
        uint8_t *req = ubt_request_frame(100 + k, "after-ack0", att, sizeof att, &n);
        bool sent = jt_send_all(fd, req, n);
        free(req);
        uint8_t *resp = sent ? ubt_read_frame_fd(fd, &rn, 10000) : NULL;
        bool ok = resp && ubt_response_is(resp, rn, 100 + k, "after-ack0", att, sizeof att);
        free(resp);
        if (!ok) {
            fprintf(stderr, "  [%s] no echo on the connection after ACK 0 (request %d)\n", label,
                    k);
            return false;
        }
    }
    return true;
}

/* ---- UBRing by hand (UBRING.md §2-§6) ------------------------------------------------------- */

enum {
    UBT_HELLO_LEN = 64,
    UBT_SEG = 4 << 20,
    UBT_OFF_TX_IO = 0,
    UBT_OFF_TX_FLAG = 8,
    UBT_OFF_RX_IO = 16,
    UBT_OFF_RX_FLAG = 24,
    UBT_OFF_TAIL = 32,
    UBT_OFF_TIMEOUT = 36,
    UBT_OFF_HB = 40,
    UBT_OFF_DATAQ = 64,
    UBT_CHUNK = 64,
    UBT_PAYLOAD = 60,
};

/* A 64-byte hello: "UB", msg_len, versions, len, name (NUL-padded to 48). */
static UBT_UNUSED void ubt_hello_pack(uint8_t *h, uint16_t msg_len, uint16_t hello_ver,
                                      uint16_t impl_ver, uint64_t len, const char *name)
{
    memset(h, 0, UBT_HELLO_LEN);
    h[0] = 'U';
    h[1] = 'B';
    h[2] = (uint8_t)(msg_len >> 8);
    h[3] = (uint8_t)msg_len;
    h[4] = (uint8_t)(hello_ver >> 8);
    h[5] = (uint8_t)hello_ver;
    h[6] = (uint8_t)(impl_ver >> 8);
    h[7] = (uint8_t)impl_ver;
    for (int i = 0; i < 8; i++)
        h[8 + i] = (uint8_t)(len >> (56 - 8 * i));
    size_t n = strlen(name);
    memcpy(h + 16, name, n > 48 ? 48 : n);
}

static UBT_UNUSED uint16_t ubt_be16(const uint8_t *p)
{
    return (uint16_t)(p[0] << 8 | p[1]);
}

/* A 64-byte hello is "un-negotiable": magic UB, msg_len 64, versions 0/0
 * and bytes 8..63 all zero (jetrpc zeroes what brpc leaves uninitialised). */
static UBT_UNUSED bool ubt_hello_is_unnegotiable(const uint8_t *h)
{
    if (h[0] != 'U' || h[1] != 'B' || ubt_be16(h + 2) != 64 || ubt_be16(h + 4) != 0 ||
        ubt_be16(h + 6) != 0)
        return false;
    for (int i = 8; i < 64; i++)
        if (h[i]) return false;
    return true;
}

static UBT_UNUSED volatile uint32_t *ubt_u32(uint8_t *seg, size_t off)
{
    return (volatile uint32_t *)(seg + off);
}

static UBT_UNUSED volatile uint64_t *ubt_u64(uint8_t *seg, size_t off)
{
    return (volatile uint64_t *)(seg + off);
}

/* A raw UBRing client connection. */
typedef struct ubt_raw {
    int fd;
    char name[64];  /* own segment name (unlinked once established) */
    char sname[64]; /* the server's */
    uint8_t *own;   /* own segment: the server writes our receive queue */
    size_t own_len;
    uint8_t *peer; /* the server's segment: we write its receive queue */
    size_t peer_len;
    uint32_t own_cap, peer_cap;
    uint32_t w, r;  /* write position in the peer queue, read position in ours */
    uint64_t io_id; /* doorbell count */
    uint8_t reply[64];
} ubt_raw_t;

/* How a raw handshake misbehaves. */
typedef struct ubt_raw_opts {
    uint16_t msg_len;      /* 0: 64 */
    uint16_t hello_ver;    /* 0: 2 */
    uint64_t announce_len; /* 0: the real size */
    size_t seg_len;        /* 0: 4 MiB */
    const char *name;      /* NULL: the proper UBRING_<ip:port>_C */
    bool no_segment;       /* announce a name that does not exist */
    uid_t owner;           /* 0: ours; else the segment is given to this user */
    bool keep_name;        /* leave the own segment's name until ubt_raw_close */
} ubt_raw_opts_t;

/* Closes the ring as brpc does actively, then everything. true when the
 * server acknowledged the close (our Rx flag CLOSED within 500 ms); false
 * when it did not, or when no ring was established. */
static UBT_UNUSED bool ubt_raw_close(ubt_raw_t *c)
{
    bool acked = false;
    if (c->peer && c->peer != MAP_FAILED) {
        /* brpc's active close: peer Tx CLOSING, peer Rx CLOSED; the server
         * acknowledges by setting our Rx to CLOSED. */
        __atomic_store_n(ubt_u32(c->peer, UBT_OFF_TX_FLAG), 2, __ATOMIC_RELEASE);
        __atomic_store_n(ubt_u32(c->peer, UBT_OFF_RX_FLAG), 3, __ATOMIC_RELEASE);
        if (c->own)
            acked = JT_WAIT_UNTIL(
                __atomic_load_n(ubt_u32(c->own, UBT_OFF_RX_FLAG), __ATOMIC_ACQUIRE) == 3, 500000);
        munmap(c->peer, c->peer_len);
    }
    if (c->own && c->own != MAP_FAILED) munmap(c->own, c->own_len);
    if (c->name[0]) shm_unlink(c->name);
    if (c->fd >= 0) close(c->fd);
    memset(c, 0, sizeof *c);
    c->fd = -1;
    return acked;
}

/* Connects to 127.0.0.1:port and runs the client handshake as UBRING.md
 * §3.2 says. Returns 1 when UBRing is established (ACK 1 sent), 0 when the
 * server answered an un-negotiable hello (ACK 0 sent: the connection goes on
 * as TCP; its bytes are in c->reply), -1 when the server closed the
 * connection on the hello, -2 on any other failure, -3 when the segment
 * cannot be given to o->owner (not root). c->fd stays open in the first two
 * cases. */
static UBT_UNUSED int ubt_raw_connect(ubt_raw_t *c, int port, const ubt_raw_opts_t *o)
{
    ubt_raw_opts_t none = {0};
    if (!o) o = &none;
    memset(c, 0, sizeof *c);
    c->fd = jt_tcp_connect(port, 0);
    if (c->fd < 0) return -2;
    struct sockaddr_in a;
    socklen_t alen = sizeof a;
    if (getsockname(c->fd, (struct sockaddr *)&a, &alen) < 0) return -2;
    char ip[32];
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
    size_t seg_len = o->seg_len ? o->seg_len : UBT_SEG;
    char proper[64];
    snprintf(proper, sizeof proper, "UBRING_%s:%d_C", ip, ntohs(a.sin_port));
    snprintf(c->sname, sizeof c->sname, "UBRING_%s:%d_S", ip, ntohs(a.sin_port));
    const char *announce = o->name ? o->name : proper;
    if (!o->no_segment) {
        snprintf(c->name, sizeof c->name, "%s", announce);
        int sfd = shm_open(c->name, O_CREAT | O_EXCL | O_RDWR, 0666);
        if (sfd < 0) {
            c->name[0] = 0;
            return -2;
        }
        if (ftruncate(sfd, (off_t)seg_len) < 0) {
            close(sfd);
            return -2;
        }
        if (o->owner && fchown(sfd, o->owner, o->owner) < 0) {
            close(sfd);
            return -3;
        }
        c->own = mmap(NULL, seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
        close(sfd);
        if (c->own == MAP_FAILED) {
            c->own = NULL;
            return -2;
        }
        c->own_len = seg_len;
        c->own_cap = (uint32_t)((seg_len - UBT_OFF_DATAQ) / UBT_CHUNK);
        *ubt_u32(c->own, UBT_OFF_TIMEOUT) = 1;
    }
    uint8_t h[UBT_HELLO_LEN];
    ubt_hello_pack(h, o->msg_len ? o->msg_len : 64, o->hello_ver ? o->hello_ver : 2, 1,
                   o->announce_len ? o->announce_len : seg_len, announce);
    if (!jt_send_all(c->fd, h, sizeof h)) return -2;
    size_t got = jt_read_n(c->fd, c->reply, sizeof c->reply, 10000);
    if (got == 0) return jt_wait_eof(c->fd, 100) ? -1 : -2;
    if (got != sizeof c->reply) return -2;
    if (c->reply[0] != 'U' || c->reply[1] != 'B') return -2;
    uint8_t ack[4] = {0, 0, 0, 0};
    if (ubt_be16(c->reply + 4) != 2 || ubt_be16(c->reply + 6) != 1 || !c->own) {
        if (!jt_send_all(c->fd, ack, 4)) return -2;
        return 0;
    }
    uint32_t tail = __atomic_load_n(ubt_u32(c->own, UBT_OFF_TAIL), __ATOMIC_ACQUIRE);
    c->peer_len = (size_t)UBT_CHUNK * ((size_t)tail + 1) + UBT_OFF_DATAQ;
    int sfd = shm_open(c->sname, O_RDWR, 0);
    struct stat st;
    if (sfd < 0 || fstat(sfd, &st) < 0 || (size_t)st.st_size < c->peer_len) {
        fprintf(stderr, "  raw client: server segment %s unusable (tail %u)\n", c->sname, tail);
        if (sfd >= 0) close(sfd);
        return -2;
    }
    c->peer = mmap(NULL, c->peer_len, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
    close(sfd);
    if (c->peer == MAP_FAILED) {
        c->peer = NULL;
        return -2;
    }
    c->peer_cap = tail + 1;
    __atomic_store_n(ubt_u32(c->peer, UBT_OFF_TX_FLAG), 1, __ATOMIC_RELEASE);
    __atomic_store_n(ubt_u32(c->own, UBT_OFF_RX_FLAG), 1, __ATOMIC_RELEASE);
    ack[3] = 1;
    if (!jt_send_all(c->fd, ack, 4)) return -2;
    if (!o->keep_name) {
        shm_unlink(c->name);
        c->name[0] = 0;
    }
    return 1;
}

/* Tells the server we are alive (peer heart_beat := 1). */
static UBT_UNUSED void ubt_raw_heartbeat(ubt_raw_t *c)
{
    __atomic_store_n(c->peer + UBT_OFF_HB, 1, __ATOMIC_RELEASE);
}

/* Free slots in the server's queue (UBRING.md §6). */
static UBT_UNUSED uint32_t ubt_raw_free(ubt_raw_t *c)
{
    uint32_t t = __atomic_load_n(ubt_u32(c->own, UBT_OFF_TAIL), __ATOMIC_ACQUIRE);
    if (t >= c->peer_cap) return 0;
    return c->w > t ? t + c->peer_cap - c->w : t - c->w;
}

/* Stores one chunk image (flag last, with release) at the write position. */
static UBT_UNUSED void ubt_raw_put_chunk(ubt_raw_t *c, const uint8_t *payload, uint8_t len,
                                         uint8_t flag, uint8_t cursor)
{
    uint8_t *ch = c->peer + UBT_OFF_DATAQ + (size_t)c->w * UBT_CHUNK;
    memset(ch, 0, UBT_CHUNK - 4);
    if (payload) memcpy(ch, payload, len < UBT_PAYLOAD ? len : UBT_PAYLOAD);
    ch[61] = len;
    ch[62] = cursor;
    ch[63] = 0;
    __atomic_store_n(ch + 60, flag, __ATOMIC_RELEASE);
    c->w = (c->w + 1) % c->peer_cap;
}

static UBT_UNUSED void ubt_raw_doorbell(ubt_raw_t *c)
{
    __atomic_store_n(ubt_u64(c->peer, UBT_OFF_RX_IO), ++c->io_id, __ATOMIC_RELEASE);
}

/* One all-or-nothing write call of p[0..n) (waits, bounded, for room). */
static UBT_UNUSED bool ubt_raw_write(ubt_raw_t *c, const uint8_t *p, size_t n)
{
    uint32_t need = (uint32_t)((n + UBT_PAYLOAD - 1) / UBT_PAYLOAD);
    if (!JT_WAIT_UNTIL(ubt_raw_free(c) >= need, 10000000)) return false;
    ubt_raw_doorbell(c);
    for (size_t off = 0; off < n; off += UBT_PAYLOAD) {
        size_t k = n - off < UBT_PAYLOAD ? n - off : UBT_PAYLOAD;
        ubt_raw_put_chunk(c, p + off, (uint8_t)k, off + k == n ? 2 : 1, 0);
    }
    return true;
}

/* Reads n bytes from our receive queue (bounded by timeout_ms), publishing
 * the tail into the server's segment after every chunk. */
static UBT_UNUSED bool ubt_raw_read(ubt_raw_t *c, uint8_t *out, size_t n, int timeout_ms)
{
    size_t got = 0;
    int64_t end = jt_now_ms() + timeout_ms;
    while (got < n) {
        uint8_t *ch = c->own + UBT_OFF_DATAQ + (size_t)c->r * UBT_CHUNK;
        uint8_t flag = __atomic_load_n(ch + 60, __ATOMIC_ACQUIRE);
        if (flag == 0) {
            if (jt_now_ms() > end) return false;
            ubt_raw_heartbeat(c);
            usleep(100);
            continue;
        }
        uint8_t len = ch[61], cur = ch[62];
        if (len == 0 || len > UBT_PAYLOAD || cur > len || flag > 2) {
            fprintf(stderr, "  raw client: bad chunk from the server (len %u cursor %u flag %u)\n",
                    len, cur, flag);
            return false;
        }
        size_t k = (size_t)(len - cur);
        if (k > n - got) k = n - got;
        memcpy(out + got, ch + cur, k);
        got += k;
        if (cur + k < len) {
            ch[62] = (uint8_t)(cur + k);
            continue;
        }
        ch[62] = len;
        __atomic_store_n(ch + 60, 0, __ATOMIC_RELEASE);
        __atomic_store_n(ubt_u32(c->peer, UBT_OFF_TAIL), c->r, __ATOMIC_RELEASE);
        c->r = (c->r + 1) % c->own_cap;
    }
    return true;
}

/* One whole baidu_std frame from our receive queue: malloc'd, or NULL. */
static UBT_UNUSED uint8_t *ubt_raw_read_frame(ubt_raw_t *c, size_t *len_p, int timeout_ms)
{
    uint8_t h[12];
    if (!ubt_raw_read(c, h, 12, timeout_ms) || memcmp(h, "PRPC", 4) != 0) return NULL;
    uint32_t body = jt_get_be32(h + 4);
    if (body > (64u << 20)) return NULL;
    uint8_t *p = malloc(12 + (size_t)body);
    if (!p) abort();
    memcpy(p, h, 12);
    if (!ubt_raw_read(c, p + 12, body, timeout_ms)) {
        free(p);
        return NULL;
    }
    *len_p = 12 + (size_t)body;
    return p;
}

/* ---- stderr capture ------------------------------------------------------------------------ */

typedef struct ubt_capture {
    int saved;
    char path[96];
} ubt_capture_t;

/* From now on fd 2 goes to a temporary file (the log lines of this process). */
static UBT_UNUSED void ubt_capture_start(ubt_capture_t *cap)
{
    snprintf(cap->path, sizeof cap->path, "/tmp/ubt-stderr-%d.log", (int)getpid());
    fflush(stderr);
    cap->saved = dup(2);
    int fd = open(cap->path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
}

/* Restores fd 2; returns what was written meanwhile (malloc'd, NUL-ended). */
static UBT_UNUSED char *ubt_capture_stop(ubt_capture_t *cap)
{
    fflush(stderr);
    dup2(cap->saved, 2);
    close(cap->saved);
    size_t n = 0;
    char *s = jt_read_file(cap->path, &n);
    unlink(cap->path);
    char *z = malloc(n + 1);
    if (!z) abort();
    if (s) memcpy(z, s, n);
    z[n] = 0;
    free(s);
    return z;
}

#endif
