/* brpc's example/rdma_performance client, on jetrpc: thread_num channels
 * (connections), each keeping queue_depth asynchronous calls in flight; each
 * done callback records its call and issues the next. After test_seconds it
 * prints latency (avg, p50, p90, p99, p99.9), QPS, MB/s and the CPU usage of
 * both processes (the server's comes back in every response).
 *
 *   urma_perf_client --server=127.0.0.1:8002 --socket_mode=urma \
 *       --urma_lib=build/softub/libsoftub.so --attachment_size=4096
 *
 * The per-call path allocates nothing in the example itself: each slot
 * reuses one call object whose request attachment stays filled. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "bench_stats.h"
#include "perf.pb-c.h"

JET_FLAG_DEFINE_INT32(thread_num, 1, "Channels (connections), each with queue_depth calls");
JET_FLAG_DEFINE_INT32(queue_depth, 1, "Calls in flight per channel");
JET_FLAG_DEFINE_INT32(attachment_size, 0, "Bytes of request attachment");
JET_FLAG_DEFINE_BOOL(echo_attachment, false, "Ask the server to echo the attachment back");
JET_FLAG_DEFINE_INT32(test_seconds, 10, "Measured seconds");
JET_FLAG_DEFINE_INT32(warmup_seconds, 1, "Unmeasured seconds before the measurement");
JET_FLAG_DEFINE_STRING(socket_mode, "tcp", "Transport: tcp, ubring or urma");
JET_FLAG_DEFINE_STRING(server, "127.0.0.1:8002", "Address of the PerfTestServer");
JET_FLAG_DEFINE_INT32(rpc_timeout_ms, 2000, "RPC timeout in milliseconds");

#define PERF_MAX_SLOTS 4096

enum { PERF_WARMUP, PERF_MEASURE, PERF_STOP };

typedef struct perf_slot {
    jet_channel_t *ch;
    jet_call_t *call;
    int64_t start_ns;
    uint64_t bytes;
    uint64_t errors;
    uint64_t server_cpu; /* last cpu_usage seen */
    bench_hist_t hist;
} perf_slot_t;

static _Atomic int perf_phase;
static pthread_mutex_t perf_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t perf_cond = PTHREAD_COND_INITIALIZER;
static int perf_finished;
static char perf_first_error[256];
static Test__PerfTestRequest perf_request = TEST__PERF_TEST_REQUEST__INIT;

static void perf_slot_finish(void)
{
    pthread_mutex_lock(&perf_lock);
    perf_finished++;
    pthread_cond_broadcast(&perf_cond);
    pthread_mutex_unlock(&perf_lock);
}

static void perf_note_error(perf_slot_t *sl, const char *text)
{
    sl->errors++;
    pthread_mutex_lock(&perf_lock);
    if (!perf_first_error[0]) snprintf(perf_first_error, sizeof perf_first_error, "%s", text);
    pthread_mutex_unlock(&perf_lock);
}

static void perf_issue(perf_slot_t *sl);

/* On an event-loop thread. A failed slot stops, as in brpc's client: a dead
 * server must not turn the client into a busy loop. */
static void perf_done(jet_call_t *call, void *arg)
{
    perf_slot_t *sl = arg;
    int64_t now = bench_now_ns();
    if (jet_call_failed(call)) {
        char text[256];
        snprintf(text, sizeof text, "[E%d] %s", jet_call_error_code(call),
                 jet_call_error_text(call));
        perf_note_error(sl, text);
        perf_slot_finish();
        return;
    }
    int phase = atomic_load_explicit(&perf_phase, memory_order_relaxed);
    if (phase == PERF_MEASURE) {
        hist_add(&sl->hist, (uint64_t)(now - sl->start_ns));
        sl->bytes += (uint64_t)JET_FLAG(attachment_size) +
                     jet_iobuf_len(jet_call_response_attachment(call));
        const Test__PerfTestResponse *resp = (const void *)jet_call_response(call);
        if (resp) sl->server_cpu = resp->cpu_usage;
    }
    if (phase == PERF_STOP)
        perf_slot_finish();
    else
        perf_issue(sl);
}

static void perf_issue(perf_slot_t *sl)
{
    sl->start_ns = bench_now_ns();
    int rc = jet_channel_call(sl->ch, &test__perf_test_service__descriptor, 0, sl->call,
                              &perf_request.base, perf_done, sl);
    if (rc < 0) {
        perf_note_error(sl, jet_strerror(rc));
        perf_slot_finish();
    }
}

/* Until deadline_ns or until all slots finished; true when they all did. */
static bool perf_wait(int nslots, int64_t deadline_ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t left = deadline_ns - bench_now_ns();
    if (left < 0) left = 0;
    ts.tv_sec += left / 1000000000;
    ts.tv_nsec += left % 1000000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&perf_lock);
    while (perf_finished < nslots)
        if (pthread_cond_timedwait(&perf_cond, &perf_lock, &ts) == ETIMEDOUT) break;
    bool all = perf_finished >= nslots;
    pthread_mutex_unlock(&perf_lock);
    return all;
}

int main(int argc, char **argv)
{
    if (jet_flags_parse(&argc, &argv) < 0) return 2;
    int threads = JET_FLAG(thread_num), depth = JET_FLAG(queue_depth);
    if (threads < 1 || depth < 1 || (int64_t)threads * depth > PERF_MAX_SLOTS ||
        JET_FLAG(attachment_size) < 0 || JET_FLAG(test_seconds) < 1 ||
        JET_FLAG(warmup_seconds) < 0) {
        fprintf(stderr, "need thread_num, queue_depth, test_seconds >= 1, attachment_size >= 0 "
                        "and at most %d calls in flight\n",
                PERF_MAX_SLOTS);
        return 2;
    }
    jet_channel_options_t copts;
    jet_channel_options_init(&copts);
    copts.timeout_ms = JET_FLAG(rpc_timeout_ms);
    copts.max_retry = 0;
    if (jet_socket_mode_parse(JET_FLAG(socket_mode), &copts.socket_mode) < 0) {
        fprintf(stderr, "unknown --socket_mode=%s\n", JET_FLAG(socket_mode));
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    perf_request.echo_attachment = JET_FLAG(echo_attachment);

    int nslots = threads * depth, rc = 0, made = 0, nch = 0;
    size_t att_size = (size_t)JET_FLAG(attachment_size);
    jet_channel_t **chs = calloc((size_t)threads, sizeof *chs);
    perf_slot_t *slots = calloc((size_t)nslots, sizeof *slots);
    char *att = att_size ? malloc(att_size) : NULL;
    if (!chs || !slots || (att_size && !att)) {
        rc = -ENOMEM;
        goto out_free;
    }
    for (size_t i = 0; i < att_size; i++)
        att[i] = (char)('a' + i % 26);
    for (; nch < threads; nch++) {
        rc = jet_channel_create(JET_FLAG(server), &copts, &chs[nch]);
        if (rc < 0) {
            fprintf(stderr, "Fail to create a channel to %s: %s\n", JET_FLAG(server),
                    jet_strerror(rc));
            goto out_channels;
        }
    }
    for (; made < nslots; made++) {
        perf_slot_t *sl = &slots[made];
        sl->ch = chs[made / depth];
        sl->call = jet_call_create();
        if (!sl->call ||
            (att && jet_iobuf_append(jet_call_request_attachment(sl->call), att, att_size) < 0)) {
            if (sl->call) made++;
            rc = -ENOMEM;
            goto out_calls;
        }
    }

    atomic_store(&perf_phase, PERF_WARMUP);
    for (int i = 0; i < nslots; i++)
        perf_issue(&slots[i]);
    perf_wait(nslots, bench_now_ns() + (int64_t)JET_FLAG(warmup_seconds) * 1000000000);
    double ccpu0 = bench_self_cpu_us();
    int64_t t0 = bench_now_ns();
    atomic_store(&perf_phase, PERF_MEASURE);
    perf_wait(nslots, t0 + (int64_t)JET_FLAG(test_seconds) * 1000000000);
    atomic_store(&perf_phase, PERF_STOP);
    int64_t t1 = bench_now_ns();
    double ccpu1 = bench_self_cpu_us();
    int64_t drain_ms = (int64_t)JET_FLAG(rpc_timeout_ms) + 5000;
    if (!perf_wait(nslots, bench_now_ns() + drain_ms * 1000000)) {
        /* Calls still in flight own their slots: no orderly teardown. */
        fprintf(stderr, "%d of %d calls did not finish\n", nslots - perf_finished, nslots);
        _exit(1);
    }

    bench_hist_t *all = calloc(1, sizeof *all);
    if (!all) {
        rc = -ENOMEM;
        goto out_calls;
    }
    uint64_t bytes = 0, errors = 0, server_cpu = 0;
    for (int i = 0; i < nslots; i++) {
        hist_merge(all, &slots[i].hist);
        bytes += slots[i].bytes;
        errors += slots[i].errors;
        if (slots[i].server_cpu > server_cpu) server_cpu = slots[i].server_cpu;
    }
    double secs = (double)(t1 - t0) / 1e9;
    printf("socket_mode=%s thread_num=%d queue_depth=%d attachment_size=%zu echo_attachment=%s "
           "test_seconds=%.1f\n",
           JET_FLAG(socket_mode), threads, depth, att_size,
           JET_FLAG(echo_attachment) ? "true" : "false", secs);
    /* All slots failed: no window to divide by. */
    if (all->count) {
        printf("Avg-Latency: %.1f us, 50th: %.1f us, 90th: %.1f us, 99th: %.1f us, 99.9th: %.1f "
               "us\n",
               (double)all->sum_ns / (double)all->count / 1e3, hist_quantile(all, 0.50) / 1e3,
               hist_quantile(all, 0.90) / 1e3, hist_quantile(all, 0.99) / 1e3,
               hist_quantile(all, 0.999) / 1e3);
        printf("QPS: %.0f, Throughput: %.2f MB/s (attachment bytes both ways, MiB)\n",
               (double)all->count / secs, (double)bytes / (1024.0 * 1024.0) / secs);
        printf("Client CPU-utilization: %.0f%%, Server CPU-utilization: %" PRIu64 "%%\n",
               (ccpu1 - ccpu0) / 1e4 / secs, server_cpu);
    }
    if (errors) {
        printf("Errors: %" PRIu64 " (first: %s)\n", errors, perf_first_error);
        rc = -EIO;
    }
    free(all);

out_calls:
    for (int i = 0; i < made; i++)
        jet_call_destroy(slots[i].call);
out_channels:
    for (int i = 0; i < nch; i++)
        jet_channel_destroy(chs[i]);
out_free:
    free(att);
    free(slots);
    free(chs);
    if (rc == -ENOMEM) fprintf(stderr, "out of memory\n");
    return rc < 0 ? 1 : 0;
}
