#include "rpc/transports.h"

#include <pthread.h>

#include "net/transport.h"
#include "ubring/ubring_transport.h"
#include "urma/urma_transport.h"

static pthread_once_t rpc_transports_once = PTHREAD_ONCE_INIT;

static void rpc_transports_register(void)
{
    jet__transports_init();
    jet__transport_register(&jet__urma_transport);
    jet__transport_register(&jet__ubring_transport);
}

void jet__rpc_transports_init(void)
{
    pthread_once(&rpc_transports_once, rpc_transports_register);
}
