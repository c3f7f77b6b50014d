/* A program as a user of an installed jetrpc writes it, outside this source
 * tree: test/install/check.sh builds it with `pkg-config --cflags --libs
 * jetrpc` against a temporary prefix (and the protoc-c output of
 * example/echo/echo.proto), nothing else. One server on a free loopback port,
 * one channel, one Echo call with a snappy-compressed request and an
 * attachment; it prints what came back, and check.sh compares. */
#include <stdio.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"

static void consumer_echo(Example__EchoService_Service *service, const Example__EchoRequest *req,
                          Example__EchoResponse_Closure closure, void *closure_data)
{
    jet_call_t *call = jet_server_call(closure_data);
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = req->message;
    jet_iobuf_move(jet_call_response_attachment(call), jet_call_request_attachment(call));
    closure(&resp, closure_data);
}

int main(int argc, char **argv)
{
    if (jet_flags_parse(&argc, &argv) < 0) return 2;
    static Example__EchoService_Service service = EXAMPLE__ECHO_SERVICE__INIT(consumer_);
    jet_server_t *srv;
    int rc = jet_server_create(NULL, &srv);
    if (rc < 0) {
        fprintf(stderr, "jet_server_create: %s\n", jet_strerror(rc));
        return 1;
    }
    rc = jet_server_add_service(srv, &service.base);
    if (rc == 0) rc = jet_server_start(srv, "127.0.0.1:0");
    if (rc < 0) {
        fprintf(stderr, "server: %s\n", jet_strerror(rc));
        jet_server_destroy(srv);
        return 1;
    }
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", jet_server_listen_port(srv));

    jet_channel_options_t opts;
    jet_channel_options_init(&opts);
    opts.timeout_ms = 30000; /* sanitizer builds are slow */
    jet_channel_t *ch;
    rc = jet_channel_create(addr, &opts, &ch);
    if (rc < 0) {
        fprintf(stderr, "jet_channel_create(%s): %s\n", addr, jet_strerror(rc));
        jet_server_stop(srv);
        jet_server_destroy(srv);
        return 1;
    }

    int status = 0;
    jet_call_t *call = jet_call_create();
    jet_call_set_request_compress_type(call, JET_COMPRESS_SNAPPY);
    jet_iobuf_append(jet_call_request_attachment(call), "attached", 8);
    Example__EchoRequest req = EXAMPLE__ECHO_REQUEST__INIT;
    req.message = "hello from an installed jetrpc";
    jet_channel_call(ch, &example__echo_service__descriptor, 0, call, &req.base, NULL, NULL);
    if (jet_call_failed(call)) {
        fprintf(stderr, "Echo failed: [E%d] %s\n", jet_call_error_code(call),
                jet_call_error_text(call));
        status = 1;
    } else {
        const Example__EchoResponse *resp = (const Example__EchoResponse *)jet_call_response(call);
        const jet_iobuf_t *att = jet_call_response_attachment(call);
        char text[16];
        size_t n = jet_iobuf_copy_to(att, text, sizeof text - 1, 0);
        text[n] = '\0';
        jet_server_stats_t stats;
        jet_server_get_stats(srv, &stats);
        printf("response: %s\n", resp->message);
        printf("attachment: %s (%zu bytes)\n", text, jet_iobuf_len(att));
        printf("server requests: %llu\n", (unsigned long long)stats.requests);
    }
    jet_call_destroy(call);
    jet_channel_destroy(ch);
    jet_server_stop(srv);
    jet_server_destroy(srv);
    return status;
}
