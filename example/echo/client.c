/* brpc's echo client, on jetrpc: same proto and flags. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"

JET_FLAG_DEFINE_STRING(attachment, "", "Carry this along with requests");
JET_FLAG_DEFINE_STRING(protocol, "baidu_std", "Protocol type");
JET_FLAG_DEFINE_STRING(connection_type, "", "Connection type: single, pooled, short");
JET_FLAG_DEFINE_STRING(server, "0.0.0.0:8000", "IP Address of server");
JET_FLAG_DEFINE_INT32(timeout_ms, 100, "RPC timeout in milliseconds");
JET_FLAG_DEFINE_INT32(max_retry, 3, "Max retries(not including the first RPC)");
JET_FLAG_DEFINE_INT32(interval_ms, 1000, "Milliseconds between consecutive requests");
JET_FLAG_DEFINE_INT32(count, 0, "Stop after this many calls (0: run until interrupted)");
JET_FLAG_DEFINE_STRING(socket_mode, "tcp", "Transport: tcp, ubring or urma");

static volatile sig_atomic_t echo_quit;

static void echo_on_signal(int sig)
{
    echo_quit = 1;
}

int main(int argc, char **argv)
{
    if (jet_flags_parse(&argc, &argv) < 0) return 2;
    jet_channel_options_t opts;
    jet_channel_options_init(&opts);
    opts.protocol = JET_FLAG(protocol);
    opts.timeout_ms = JET_FLAG(timeout_ms);
    opts.max_retry = JET_FLAG(max_retry);
    if (jet_connection_type_parse(JET_FLAG(connection_type), &opts.connection_type) < 0 ||
        jet_socket_mode_parse(JET_FLAG(socket_mode), &opts.socket_mode) < 0) {
        fprintf(stderr, "bad --connection_type or --socket_mode\n");
        return 2;
    }
    jet_channel_t *ch;
    int rc = jet_channel_create(JET_FLAG(server), &opts, &ch);
    if (rc < 0) {
        fprintf(stderr, "Fail to initialize channel: %s\n", jet_strerror(rc));
        return 1;
    }
    signal(SIGINT, echo_on_signal);
    jet_call_t *call = jet_call_create();
    int failures = 0;
    for (int i = 0; !echo_quit && (JET_FLAG(count) == 0 || i < JET_FLAG(count)); i++) {
        Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
        char msg[64];
        snprintf(msg, sizeof msg, "hello world");
        req.message = msg;
        jet_call_reset(call);
        jet_call_set_log_id(call, (uint64_t)i);
        const char *att = JET_FLAG(attachment);
        if (att[0]) jet_iobuf_append(jet_call_request_attachment(call), att, strlen(att));
        jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL);
        if (!jet_call_failed(call)) {
            const Example__EchoResponse *resp = (const void *)jet_call_response(call);
            printf("Received response from %s: %s (attached=%zu) latency=%lldus\n",
                   jet_call_remote_side(call), resp->message,
                   jet_iobuf_len(jet_call_response_attachment(call)),
                   (long long)jet_call_latency_us(call));
        } else {
            failures++;
            fprintf(stderr, "call failed: [E%d] %s\n", jet_call_error_code(call),
                    jet_call_error_text(call));
        }
        fflush(stdout);
        if (JET_FLAG(interval_ms) > 0) usleep((useconds_t)JET_FLAG(interval_ms) * 1000);
    }
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    printf("EchoClient is going to quit\n");
    return failures ? 1 : 0;
}
