#include "net/transport.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "base/log.h"

static _Atomic(const jet_transport_ops_t *) transport_table[JET_SOCKET_MODE_MAX];
static pthread_once_t transport_once = PTHREAD_ONCE_INIT;

static const char *const transport_mode_names[JET_SOCKET_MODE_MAX] = {"tcp", "rdma", "ubring",
                                                                      "urma"};

const char *jet_socket_mode_name(int mode)
{
    if (mode < 0 || mode >= JET_SOCKET_MODE_MAX) return NULL;
    return transport_mode_names[mode];
}

int jet_socket_mode_parse(const char *name, jet_socket_mode_t *mode_p)
{
    for (int i = 0; name && i < JET_SOCKET_MODE_MAX; i++) {
        if (strcasecmp(name, transport_mode_names[i]) == 0) {
            *mode_p = (jet_socket_mode_t)i;
            return 0;
        }
    }
    return -EINVAL;
}

int jet_connection_type_parse(const char *name, jet_connection_type_t *type_p)
{
    static const char *const names[] = {"single", "pooled", "short"};
    for (int i = 0; name && i < 3; i++) {
        if (strcasecmp(name, names[i]) == 0) {
            *type_p = (jet_connection_type_t)i;
            return 0;
        }
    }
    if (name && *name == 0) {
        *type_p = JET_CONNECTION_SINGLE;
        return 0;
    }
    return -EINVAL;
}

static void transport_check_ops(const jet_transport_ops_t *ops)
{
    /* Every slot is filled (stubs for unsupported ones), so callers never test for NULL. */
    if (!ops->global_init || !ops->init || !ops->release || !ops->reset || !ops->connect ||
        !ops->cut_from_iobuf_list || !ops->wait_writable || !ops->on_input || !ops->debug) {
        JET_ERROR("transport %s has an empty slot", ops->name);
        __builtin_trap();
    }
}

int jet__transport_register(const jet_transport_ops_t *ops)
{
    if (ops->mode < 0 || ops->mode >= JET_SOCKET_MODE_MAX) return -EINVAL;
    transport_check_ops(ops);
    const jet_transport_ops_t *expected = NULL;
    if (!atomic_compare_exchange_strong(&transport_table[ops->mode], &expected, ops))
        return -EEXIST;
    return 0;
}

static void transport_init_once(void)
{
    jet__transport_register(&jet__tcp_transport);
}

void jet__transports_init(void)
{
    pthread_once(&transport_once, transport_init_once);
}

const jet_transport_ops_t *jet__transport_get(int mode)
{
    if (mode < 0 || mode >= JET_SOCKET_MODE_MAX) return NULL;
    jet__transports_init();
    return atomic_load_explicit(&transport_table[mode], memory_order_acquire);
}

int jet__transport_unsupported_global_init(const jet_transport_check_t *check)
{
    return -ENOTSUP;
}

int jet__transport_unsupported_reset(struct jet_socket *s)
{
    return -ENOTSUP;
}
