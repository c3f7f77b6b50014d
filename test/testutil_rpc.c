#include "testutil_rpc.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/futex.h"

/* ---- the echo service -------------------------------------------------------- */

static _Atomic int tr_pending; /* answers still to come from helper threads */

typedef struct tr_later {
    int ms;
    char *message;
    Example__EchoResponse_Closure closure;
    void *closure_data;
} tr_later_t;

void jt_echo_answer(const char *message, Example__EchoResponse_Closure closure, void *closure_data)
{
    jet_call_t *call = jet_server_call(closure_data);
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = (char *)message;
    jet_iobuf_move(jet_call_response_attachment(call), jet_call_request_attachment(call));
    closure(&resp, closure_data);
}

static void *tr_later_main(void *arg)
{
    tr_later_t *la = arg;
    usleep((useconds_t)la->ms * 1000);
    jt_echo_answer(la->message, la->closure, la->closure_data);
    free(la->message);
    free(la);
    atomic_fetch_sub(&tr_pending, 1);
    return NULL;
}

bool jt_echo_answer_later(int ms, const char *message, Example__EchoResponse_Closure closure,
                          void *closure_data)
{
    tr_later_t *la = malloc(sizeof *la);
    if (!la) return false;
    /* Copied: the answer does not lean on the request outliving the handler. */
    *la = (tr_later_t){ms, strdup(message), closure, closure_data};
    if (!la->message) {
        free(la);
        return false;
    }
    atomic_fetch_add(&tr_pending, 1);
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int rc = pthread_create(&th, &attr, tr_later_main, la);
    pthread_attr_destroy(&attr);
    if (rc == 0) return true;
    atomic_fetch_sub(&tr_pending, 1);
    free(la->message);
    free(la);
    return false;
}

static void tr_unmap_huge(void *data, void *arg)
{
    (void)arg;
    munmap(data, (size_t)INT32_MAX + 1);
}

static void tr_echo(Example__EchoService_Service *service, const Example__EchoRequest *req,
                    Example__EchoResponse_Closure closure, void *closure_data)
{
    const jt_echo_opts_t *opts = &((jt_echo_service_t *)service)->opts;
    jet_call_t *call = jet_server_call(closure_data);
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    const char *msg = req->message;
    char buf[128];
    int code = 0, n = 0, ms = 0;

    if (opts->hook && opts->hook(req, closure, closure_data)) return;
    if (!opts->answer_lengths)
        jet_call_set_response_compress_type(call, jet_call_request_compress_type(call));
    if (strcmp(msg, "logid") == 0) {
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)jet_call_log_id(call));
        resp.message = buf;
        closure(&resp, closure_data);
        return;
    }
    if (strcmp(msg, "thread") == 0) {
        buf[0] = 0;
        pthread_getname_np(pthread_self(), buf, sizeof buf);
        resp.message = buf;
        closure(&resp, closure_data);
        return;
    }
    if (strncmp(msg, "later:", 6) == 0) {
        if (!jt_echo_answer_later(atoi(msg + 6), msg, closure, closure_data)) abort();
        return;
    }
    if (strcmp(msg, "fail") == 0) {
        jet_call_set_failed(call, 1003, "asked to fail");
        closure(NULL, closure_data);
        return;
    }
    if (sscanf(msg, "fail:%d:%n", &code, &n) == 1 && n > 0) {
        jet_call_set_failed(call, code, "%s", msg + n);
        closure(NULL, closure_data);
        return;
    }
    if (sscanf(msg, "failmsg:%d:%n", &code, &n) == 1 && n > 0) {
        jet_call_set_failed(call, code, "%s", msg + n);
        resp.message = (char *)msg;
        jet_iobuf_append(jet_call_response_attachment(call), "must not arrive", 15);
        closure(&resp, closure_data);
        return;
    }
    if (strcmp(msg, "hugeatt") == 0) {
        /* An attachment one byte over baidu_std's int32 attachment_size,
         * of reserved, untouched memory: the server must refuse to send it. */
        size_t len = (size_t)INT32_MAX + 1;
        void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED ||
            jet_iobuf_append_user(jet_call_response_attachment(call), p, len, tr_unmap_huge, NULL) < 0)
            abort();
        resp.message = (char *)msg;
        closure(&resp, closure_data);
        return;
    }
    if (strcmp(msg, "norequired") == 0) {
        /* A response without its required message: the server cannot send it. */
        Example__EchoResponse bad = EXAMPLE__ECHO_RESPONSE__INIT;
        closure(&bad, closure_data);
        return;
    }
    if (strcmp(msg, "null") == 0) {
        closure(NULL, closure_data);
        return;
    }
    if (sscanf(msg, "big:%d", &n) == 1 && n >= 0 && n <= (16 << 20)) {
        uint8_t *p = malloc(n > 0 ? (size_t)n : 1);
        if (!p) abort();
        jt_fill_pattern(p, (size_t)n, 5);
        if (jet_iobuf_append(jet_call_response_attachment(call), p, (size_t)n) < 0) abort();
        free(p);
        resp.message = "big";
        closure(&resp, closure_data);
        return;
    }
    if (strncmp(msg, "block:", 6) == 0) usleep((useconds_t)atoi(msg + 6) * 1000);
    if (sscanf(msg, "sleep:%d", &ms) == 1 && ms > 0) {
        /* On an event loop the handler must not block: a thread answers. */
        if (opts->sleep_async && jt_echo_answer_later(ms, msg, closure, closure_data)) return;
        usleep((useconds_t)ms * 1000);
    }
    if (opts->answer_lengths) {
        snprintf(buf, sizeof buf, "ok len=%zu att=%zu", strlen(msg),
                 jet_iobuf_len(jet_call_request_attachment(call)));
        resp.message = buf;
        closure(&resp, closure_data);
        return;
    }
    jt_echo_answer(msg, closure, closure_data);
}

void jt_echo_service_init(jt_echo_service_t *svc, const jt_echo_opts_t *opts)
{
    Example__EchoService_Service base = EXAMPLE__ECHO_SERVICE__INIT(tr_);
    svc->base = base;
    if (opts)
        svc->opts = *opts;
    else
        memset(&svc->opts, 0, sizeof svc->opts);
}

jet_server_t *jt_echo_server_start(jt_echo_service_t *svc, const char *addr,
                                   const jet_server_options_t *so, int *port_p)
{
    jet_server_options_t defaults;
    if (!so) {
        jet_server_options_init(&defaults);
        so = &defaults;
    }
    jet_server_t *srv = NULL;
    if (jet_server_create(so, &srv) < 0) return NULL;
    if (jet_server_add_service(srv, &svc->base.base) < 0 || jet_server_start(srv, addr) < 0) {
        jet_server_destroy(srv);
        return NULL;
    }
    if (port_p) *port_p = jet_server_listen_port(srv);
    return srv;
}

jet_server_t *jt_echo_server_start_port(jt_echo_service_t *svc, int port,
                                        const jet_server_options_t *so, int *port_p)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    return jt_echo_server_start(svc, addr, so, port_p);
}

void jt_server_stop(jet_server_t *srv)
{
    if (!srv) return;
    jet_server_stop(srv);
    jet_server_destroy(srv);
}

bool jt_echo_wait_idle(int64_t guard_us)
{
    return JT_WAIT_EVERY(atomic_load(&tr_pending) == 0, guard_us, 1000);
}

/* ---- channels and echo calls ------------------------------------------------------ */

jet_channel_t *jt_channel_open(const char *addr, jet_connection_type_t type, int32_t timeout_ms,
                               int32_t max_retry)
{
    jet_channel_options_t co;
    jet_channel_options_init(&co);
    co.connection_type = type;
    co.timeout_ms = timeout_ms;
    if (max_retry >= 0) co.max_retry = max_retry;
    jet_channel_t *ch = NULL;
    if (jet_channel_create(addr, &co, &ch) < 0) return NULL;
    return ch;
}

jet_channel_t *jt_channel_open_port(int port, jet_connection_type_t type, int32_t timeout_ms,
                                    int32_t max_retry)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    return jt_channel_open(addr, type, timeout_ms, max_retry);
}

int jt_echo_call(jet_channel_t *ch, jet_call_t *call, const char *msg, jet_call_done_cb_t done,
                 void *arg)
{
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = (char *)msg;
    return jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, done, arg);
}

const char *jt_echo_resp_message(const jet_call_t *call)
{
    const Example__EchoResponse *r = (const void *)jet_call_response(call);
    return r ? r->message : NULL;
}

bool jt_echo_resp_is(const jet_call_t *call, const char *expected)
{
    const char *m = jt_echo_resp_message(call);
    return !jet_call_failed(call) && m && strcmp(m, expected) == 0;
}

void jt_count_done(jet_call_t *call, void *arg)
{
    jt_counter_t *c = arg;
    atomic_fetch_add(&c->n, 1);
    jet__futex_wake(&c->n, INT_MAX);
}

bool jt_counter_wait(jt_counter_t *c, uint32_t target, int64_t guard_us)
{
    uint64_t until = jt_now_us() + (uint64_t)guard_us;
    for (;;) {
        uint32_t v = atomic_load(&c->n);
        if (v >= target) return true;
        if (jt_now_us() > until) return false;
        jet__futex_wait(&c->n, v, 100000);
    }
}

/* ---- server stats ------------------------------------------------------------------- */

bool jt_server_wait_stats(jet_server_t *srv, uint64_t in_flight, uint64_t open_at_most,
                          int64_t guard_us, jet_server_stats_t *st_p)
{
    uint64_t until = jt_now_us() + (uint64_t)guard_us;
    jet_server_stats_t st;
    bool ok;
    for (;;) {
        jet_server_get_stats(srv, &st);
        ok = (in_flight == JT_ANY || st.in_flight == in_flight) &&
             st.connections_open <= open_at_most;
        if (ok || jt_now_us() > until) break;
        usleep(1000);
    }
    if (!ok)
        fprintf(stderr, "  stats: in_flight=%llu (want %lld) open=%llu (want <= %llu)\n",
                (unsigned long long)st.in_flight, in_flight == JT_ANY ? -1LL : (long long)in_flight,
                (unsigned long long)st.connections_open, (unsigned long long)open_at_most);
    if (st_p) *st_p = st;
    return ok;
}

/* ---- frames from a raw connection ------------------------------------------------- */

int jt_conn_frame(jt_conn_t *c, int timeout_ms, jet_baidu_frame_t *f, uint8_t **raw_p,
                  size_t *raw_len_p)
{
    int64_t deadline = jt_now_ms() + timeout_ms;
    for (;;) {
        size_t avail = jt_conn_avail(c);
        const uint8_t *p = jt_conn_data(c);
        if (avail >= 4 && memcmp(p, "PRPC", 4) != 0) return -2;
        if (avail >= 12) {
            size_t need = 12 + (size_t)jt_get_be32(p + 4);
            if (need > JT_MAX_FRAME) return -2;
            if (avail >= need) {
                bool ok = jt_frame_decode(p, need, f);
                if (raw_p) {
                    *raw_p = malloc(need);
                    if (!*raw_p) abort();
                    memcpy(*raw_p, p, need);
                    *raw_len_p = need;
                }
                jt_conn_consume(c, need);
                return ok ? 1 : -2;
            }
        }
        if (jt_left_ms(deadline) == 0) return 0;
        if (jt_conn_pump(c, jt_left_ms(deadline)) < 0 && jt_conn_avail(c) == avail) return -1;
    }
}

/* ---- raw peers ---------------------------------------------------------------------- */

int jt_silent_upload(int port, size_t announce, size_t bytes, const char *first_msg)
{
    int fd = jt_tcp_connect(port, 0);
    if (fd < 0) return -1;
    jt_bytes_t b = {0};
    if (first_msg) jt_bytes_echo_request(&b, 7, first_msg, NULL, 0);
    jt_bytes_header(&b, (uint32_t)announce, 10);
    uint8_t *zeros = calloc(1, bytes);
    if (zeros) jt_bytes_add(&b, zeros, bytes);
    bool ok = zeros && jt_send_all(fd, b.p, b.len);
    free(zeros);
    free(b.p);
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
}
