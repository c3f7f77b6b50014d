#include <string.h>

#include "jetrpc/options.h"

void jet_server_options_init(jet_server_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->socket_mode = JET_SOCKET_MODE_TCP;
    o->graceful_stop_ms = 5000;
}

void jet_channel_options_init(jet_channel_options_t *o)
{
    memset(o, 0, sizeof *o);
    o->socket_mode = JET_SOCKET_MODE_TCP;
    o->connection_type = JET_CONNECTION_SINGLE;
    o->timeout_ms = 500;
    o->connect_timeout_ms = -2; /* "same as timeout_ms" */
    o->max_retry = 3;
    o->backup_request_ms = -1;
}
