/* brpc's echo server, on jetrpc: same proto, same flags, so brpc's echo
 * client works against it unchanged. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jetrpc/jetrpc.h>

#include "echo.pb-c.h"

JET_FLAG_DEFINE_BOOL(echo_attachment, true, "Echo attachment as well");
JET_FLAG_DEFINE_INT32(port, 8000, "TCP Port of this server");
JET_FLAG_DEFINE_STRING(listen_addr, "",
                       "Server listen address, may be IPV4/IPV6/UDS. If this is set, the flag "
                       "port will be ignored");
JET_FLAG_DEFINE_INT32(idle_timeout_s, -1,
                      "Connection will be closed if there is no read/write operations during "
                      "the last `idle_timeout_s'");
JET_FLAG_DEFINE_STRING(socket_mode, "tcp", "Transport: tcp, ubring or urma");
JET_FLAG_DEFINE_BOOL(usercode_in_pool, false, "Run handlers on worker threads");

static volatile sig_atomic_t echo_quit;

static void echo_on_signal(int sig)
{
    echo_quit = 1;
}

static void echo_echo(Example__EchoService_Service *service, const Example__EchoRequest *req,
                      Example__EchoResponse_Closure closure, void *closure_data)
{
    jet_call_t *call = jet_server_call(closure_data);
    Example__EchoResponse resp = EXAMPLE__ECHO_RESPONSE__INIT;
    resp.message = req->message;
    if (JET_FLAG(echo_attachment))
        jet_iobuf_move(jet_call_response_attachment(call), jet_call_request_attachment(call));
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
    static Example__EchoService_Service service = EXAMPLE__ECHO_SERVICE__INIT(echo_);
    jet_server_t *srv;
    if (jet_server_create(&opts, &srv) < 0 || jet_server_add_service(srv, &service.base) < 0) {
        fprintf(stderr, "Fail to add service\n");
        return 1;
    }
    char addr[300];
    if (JET_FLAG(listen_addr)[0])
        snprintf(addr, sizeof addr, "%s", JET_FLAG(listen_addr));
    else
        snprintf(addr, sizeof addr, "0.0.0.0:%d", JET_FLAG(port));
    int rc = jet_server_start(srv, addr);
    if (rc < 0) {
        fprintf(stderr, "Fail to start EchoServer: %s\n", jet_strerror(rc));
        return 1;
    }
    printf("EchoServer listening on port %d (%s)\n", jet_server_listen_port(srv),
           JET_FLAG(socket_mode));
    fflush(stdout);
    signal(SIGINT, echo_on_signal);
    signal(SIGTERM, echo_on_signal);
    while (!echo_quit) pause();
    jet_server_stop(srv);
    jet_server_destroy(srv);
    return 0;
}
