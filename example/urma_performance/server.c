/* brpc's example/rdma_performance server, on jetrpc: answers
 * PerfTestService.Test, echoing the attachment when asked, and reports its
 * process CPU utilisation in every response.
 *
 *   urma_perf_server --port=8002 --socket_mode=urma \
 *       --urma_lib=build/softub/libsoftub.so        (SOFTUB_FABRIC=<name> on softub)
 *
 * Library flags (urma_*, event_loop_num, log_level, ...) work as on any
 * jetrpc program; --help lists them. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "perf.pb-c.h"

JET_FLAG_DEFINE_INT32(port, 8002, "TCP port of this server");
JET_FLAG_DEFINE_STRING(listen_addr, "",
                       "Listen address (ip:port or unix:/path); overrides --port when set");
JET_FLAG_DEFINE_STRING(socket_mode, "tcp", "Transport: tcp, ubring or urma");
JET_FLAG_DEFINE_INT32(idle_timeout_s, -1, "Close connections idle this long (-1: never)");
JET_FLAG_DEFINE_BOOL(usercode_in_pool, false, "Run handlers on worker threads");

static volatile sig_atomic_t perf_quit;
/* Percent of one core over the last sample; written by the sampler thread,
 * read by handlers on any loop thread. */
static _Atomic uint64_t perf_cpu_pct;

static void perf_on_signal(int sig)
{
    (void)sig;
    perf_quit = 1;
}

static double perf_cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static double perf_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Sampling once a second off the request path keeps getrusage (a syscall)
 * out of every call. */
static void *perf_sampler_main(void *arg)
{
    (void)arg;
    double cpu0 = perf_cpu_us(), wall0 = perf_wall_us();
    while (!perf_quit) {
        sleep(1);
        double cpu1 = perf_cpu_us(), wall1 = perf_wall_us();
        if (wall1 > wall0)
            atomic_store_explicit(&perf_cpu_pct, (uint64_t)((cpu1 - cpu0) * 100.0 / (wall1 - wall0) + 0.5),
                                  memory_order_relaxed);
        cpu0 = cpu1;
        wall0 = wall1;
    }
    return NULL;
}

static void perf_test(Test__PerfTestService_Service *service, const Test__PerfTestRequest *req,
                      Test__PerfTestResponse_Closure closure, void *closure_data)
{
    (void)service;
    Test__PerfTestResponse resp = TEST__PERF_TEST_RESPONSE__INIT;
    resp.cpu_usage = atomic_load_explicit(&perf_cpu_pct, memory_order_relaxed);
    if (req->echo_attachment) {
        jet_call_t *call = jet_server_call(closure_data);
        jet_iobuf_move(jet_call_response_attachment(call), jet_call_request_attachment(call));
    }
    closure(&resp, closure_data);
}

int main(int argc, char **argv)
{
    if (jet_flags_parse(&argc, &argv) < 0) return 2;
    jet_server_options_t opts;
    jet_server_options_init(&opts);
    if (jet_socket_mode_parse(JET_FLAG(socket_mode), &opts.socket_mode) < 0) {
        fprintf(stderr, "unknown --socket_mode=%s\n", JET_FLAG(socket_mode));
        return 2;
    }
    opts.idle_timeout_sec = JET_FLAG(idle_timeout_s);
    opts.usercode_in_pool = JET_FLAG(usercode_in_pool);
    static Test__PerfTestService_Service service = TEST__PERF_TEST_SERVICE__INIT(perf_);
    jet_server_t *srv;
    int rc = jet_server_create(&opts, &srv);
    if (rc < 0) {
        fprintf(stderr, "Fail to create the server: %s\n", jet_strerror(rc));
        return 1;
    }
    rc = jet_server_add_service(srv, &service.base);
    char addr[300];
    if (JET_FLAG(listen_addr)[0])
        snprintf(addr, sizeof addr, "%s", JET_FLAG(listen_addr));
    else
        snprintf(addr, sizeof addr, "0.0.0.0:%d", JET_FLAG(port));
    if (rc == 0) rc = jet_server_start(srv, addr);
    if (rc < 0) {
        fprintf(stderr, "Fail to start PerfTestServer on %s: %s\n", addr, jet_strerror(rc));
        jet_server_destroy(srv);
        return 1;
    }
    signal(SIGINT, perf_on_signal);
    signal(SIGTERM, perf_on_signal);
    pthread_t sampler;
    bool sampling = pthread_create(&sampler, NULL, perf_sampler_main, NULL) == 0;
    printf("PerfTestServer listening on port %d (%s)\n", jet_server_listen_port(srv),
           JET_FLAG(socket_mode));
    fflush(stdout);
    while (!perf_quit)
        usleep(100 * 1000); /* a signal may land on any thread */
    jet_server_stop(srv);
    jet_server_destroy(srv);
    if (sampling) pthread_join(sampler, NULL);
    return 0;
}
