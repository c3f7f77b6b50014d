/* jetrpc: baidu_std RPC over TCP, URMA and UB shared memory. Umbrella header. */
#ifndef JETRPC_JETRPC_H
#define JETRPC_JETRPC_H

#include "jetrpc/call.h"
#include "jetrpc/channel.h"
#include "jetrpc/errors.h"
#include "jetrpc/flags.h"
#include "jetrpc/iobuf.h"
#include "jetrpc/options.h"
#include "jetrpc/server.h"
#include "jetrpc/urma.h"

#endif
