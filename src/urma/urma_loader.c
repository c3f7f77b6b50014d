#include "urma/urma_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static bool loader_is_minimal(const char *name)
{
#define JET_URMA_MIN_NAME_(ret, fn, params) #fn,
    static const char *const minimal[] = {URMA_API_MINIMAL(JET_URMA_MIN_NAME_)};
#undef JET_URMA_MIN_NAME_
    for (size_t i = 0; i < sizeof minimal / sizeof minimal[0]; i++)
        if (strcmp(minimal[i], name) == 0) return true;
    return false;
}

/* The generation from its symbols (URMA-API.md §2.5); refused when the
 * structures jetrpc passes have another layout there (§5.1). */
static int loader_generation(jet_urma_lib_t *lib, char *why, size_t why_len)
{
    if (lib->master_layout) {
        lib->generation = "master";
        return 0;
    }
    if (!dlsym(lib->handle, "urma_import_jetty_ex")) {
        snprintf(why, why_len,
                 "%s is a liburma of the 24.12 generation or older (no urma_import_jetty_ex): "
                 "its urma_sge_t and urma_rjetty_t are smaller than the 25.12+ layout jetrpc "
                 "is built for",
                 lib->path);
        return -ENOTSUP;
    }
    if (dlsym(lib->handle, "urma_alloc_jfc")) {
        snprintf(why, why_len,
                 "%s is a B081-generation liburma (urma_alloc_jfc without urma_get_rjetty): "
                 "its urma_rjetty_t is 72 bytes, jetrpc passes the 48-byte 25.12+ layout",
                 lib->path);
        return -ENOTSUP;
    }
    lib->generation = "25.12";
    return 0;
}

static int loader_resolve(jet_urma_lib_t *lib, char *why, size_t why_len)
{
    /* dlsym returns void *; the cast to the exact prototype is what the
     * X list declares, so a wrong signature is a compile error in the table. */
#define JET_URMA_RESOLVE_(ret, name, params)                                                       \
    *(void **)&lib->fn.name = dlsym(lib->handle, #name);                                           \
    if (!lib->fn.name && loader_is_minimal(#name)) {                                               \
        snprintf(why, why_len, "%s lacks the symbol %s", lib->path, #name);                        \
        return -ENOENT;                                                                            \
    }
    URMA_API_FUNCS(JET_URMA_RESOLVE_)
#undef JET_URMA_RESOLVE_
    lib->master_layout = lib->fn.urma_get_rjetty != NULL;
    return loader_generation(lib, why, why_len);
}

int jet__urma_lib_load(const char *path, jet_urma_lib_t *lib, char *why, size_t why_len)
{
    memset(lib, 0, sizeof *lib);
    if (!URMA_API_ABI_KNOWN) {
        snprintf(why, why_len, "the liburma ABI of this architecture is not known to jetrpc");
        return -ENOTSUP;
    }
    const char *names[3];
    int n = 0;
    if (path && *path) {
        names[n++] = path;
    } else {
        names[n++] = "liburma.so.0";
        names[n++] = "liburma.so";
    }
    char errs[512] = "";
    for (int i = 0; i < n; i++) {
        /* RTLD_GLOBAL as UMDK's own loader does: providers resolve liburma's
         * symbols through the global scope. */
        lib->handle = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
        if (lib->handle) {
            snprintf(lib->path, sizeof lib->path, "%s", names[i]);
            break;
        }
        size_t used = strlen(errs);
        snprintf(errs + used, sizeof errs - used, "%s%s", used ? "; " : "", dlerror());
    }
    if (!lib->handle) {
        snprintf(why, why_len, "cannot load liburma: %s", errs);
        return -ENOENT;
    }
    int rc = loader_resolve(lib, why, why_len);
    if (rc < 0) {
        /* Nothing of it was used: safe to unload. */
        dlclose(lib->handle);
        lib->handle = NULL;
        return rc;
    }
    return 0;
}
