/* tool_urma.c: dlopen liburma (or softub) and resolve the urma_* table. */
#include "tool_urma.h"
#include "urma/urma_names.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct tu_sym {
    const char *name;
    size_t off;
} tu_sym_t;

static const tu_sym_t tu_syms[] = {
#define TU_X(ret, name, params) {#name, offsetof(tu_lib_t, name)},
    URMA_API_FUNCS(TU_X)
#undef TU_X
};

static void **tu_slot(tu_lib_t *lib, const char *name)
{
    for (size_t i = 0; i < sizeof(tu_syms) / sizeof(tu_syms[0]); i++) {
        if (strcmp(tu_syms[i].name, name) == 0) return (void **)((char *)lib + tu_syms[i].off);
    }
    return NULL;
}

static int tu_parse_abi(const char *abi, tu_gen_t *gen)
{
    if (strcmp(abi, "master") == 0 || strcmp(abi, "26.06") == 0)
        *gen = TU_GEN_MASTER;
    else if (strcmp(abi, "25.12") == 0)
        *gen = TU_GEN_2512;
    else if (strcasecmp(abi, "b081") == 0)
        *gen = TU_GEN_B081;
    else if (strcmp(abi, "24.12") == 0)
        *gen = TU_GEN_2412;
    else
        return -EINVAL;
    return 0;
}

int tu_open(tu_lib_t *lib, const char *path, const char *abi, const char *const *required,
            char *err, size_t errlen)
{
    static const char *const defaults[] = {"liburma.so.0", "liburma.so"};
    const char *tried = path;

    memset(lib, 0, sizeof(*lib));
    if (abi) {
        if (tu_parse_abi(abi, &lib->gen) < 0) {
            snprintf(err, errlen, "unknown --abi=%s (master, 25.12, b081, 24.12)", abi);
            return -EINVAL;
        }
        lib->gen_forced = 1;
    }
    if (path) {
        lib->handle = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        if (!lib->handle) {
            snprintf(err, errlen, "dlopen(%s): %s", path, dlerror());
            return -ENOENT;
        }
    } else {
        char first[512] = "";
        for (size_t i = 0; i < 2 && !lib->handle; i++) {
            tried = defaults[i];
            lib->handle = dlopen(tried, RTLD_NOW | RTLD_GLOBAL);
            if (!lib->handle && i == 0) snprintf(first, sizeof(first), "%s", dlerror());
        }
        if (!lib->handle) {
            snprintf(err, errlen,
                     "URMA unavailable: dlopen(liburma.so.0): %s; dlopen(liburma.so): %s", first,
                     dlerror());
            return -ENOENT;
        }
    }

    struct link_map *lm = NULL;
    if (dlinfo(lib->handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
        snprintf(lib->name, sizeof(lib->name), "%s", lm->l_name);
    else
        snprintf(lib->name, sizeof(lib->name), "%s", tried);
    if (!realpath(lib->name, lib->real)) snprintf(lib->real, sizeof(lib->real), "%s", lib->name);

    for (size_t i = 0; i < sizeof(tu_syms) / sizeof(tu_syms[0]); i++)
        *(void **)((char *)lib + tu_syms[i].off) = dlsym(lib->handle, tu_syms[i].name);
    *(void **)&lib->fabric_dump = dlsym(lib->handle, "softub_fabric_dump");

    for (size_t i = 0; required && required[i]; i++) {
        void **slot = tu_slot(lib, required[i]);
        if (!slot || !*slot) {
            snprintf(err, errlen, "%s (%s) lacks %s", lib->name, lib->real, required[i]);
            tu_close(lib);
            return -ENOSYS;
        }
    }

    if (!lib->gen_forced) {
        if (lib->fabric_dump || lib->urma_get_rjetty)
            lib->gen = TU_GEN_MASTER;
        else if (dlsym(lib->handle, "urma_alloc_jfc"))
            lib->gen = TU_GEN_B081;
        else if (dlsym(lib->handle, "urma_import_jetty_ex"))
            lib->gen = TU_GEN_2512;
        else
            lib->gen = TU_GEN_2412;
    }
    return 0;
}

void tu_close(tu_lib_t *lib)
{
    if (lib->handle) dlclose(lib->handle);
    memset(lib, 0, sizeof(*lib));
}

const char *tu_gen_name(tu_gen_t gen)
{
    switch (gen) {
    case TU_GEN_2412:
        return "24.12";
    case TU_GEN_2512:
        return "25.12";
    case TU_GEN_B081:
        return "B081";
    case TU_GEN_MASTER:
        return "master/26.06";
    }
    return "?";
}

const char *tu_status_name(int status, char *buf, size_t len)
{
    const char *n;
    switch (status) {
    case URMA_SUCCESS:
        n = "URMA_SUCCESS";
        break;
    case URMA_EAGAIN:
        n = "URMA_EAGAIN";
        break;
    case URMA_ENOMEM:
        n = "URMA_ENOMEM";
        break;
    case URMA_ENOPERM:
        n = "URMA_ENOPERM";
        break;
    case URMA_ETIMEOUT:
        n = "URMA_ETIMEOUT";
        break;
    case URMA_EINVAL:
        n = "URMA_EINVAL";
        break;
    case URMA_EEXIST:
        n = "URMA_EEXIST";
        break;
    case URMA_EINPROGRESS:
        n = "URMA_EINPROGRESS";
        break;
    case URMA_FAIL:
        n = "URMA_FAIL";
        break;
    default:
        n = "status";
        break;
    }
    snprintf(buf, len, "%s (%d)", n, status);
    return buf;
}

const char *tu_cr_status_name(int status)
{
    return jet__urma_cr_status_name(status);
}

const char *tu_eid_str(const urma_eid_t *eid, char *buf, size_t len)
{
    const uint8_t *r = eid->raw;
    int n = snprintf(buf, len,
                     "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
                     r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11],
                     r[12], r[13], r[14], r[15]);
    static const uint8_t v4prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (n > 0 && (size_t)n < len && memcmp(r, v4prefix, sizeof(v4prefix)) == 0) {
        char v4[INET_ADDRSTRLEN];
        if (inet_ntop(AF_INET, r + 12, v4, sizeof(v4)))
            snprintf(buf + n, len - (size_t)n, " (::ffff:%s)", v4);
    }
    return buf;
}
