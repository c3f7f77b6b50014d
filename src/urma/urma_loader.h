/* Loading liburma at run time.
 *
 * jetrpc never links liburma: it dlopens the file named by the flag
 * urma_lib, else "liburma.so.0", else "liburma.so", and resolves every
 * function into one table. A missing minimal-set symbol makes the whole load
 * fail (URMA is then unavailable and connections stay on TCP); optional and
 * later-generation symbols may be NULL. The handle is kept for the life of
 * the process (liburma unloads its providers in urma_uninit, never earlier).
 *
 * liburma has no version call and keeps its SONAME while its structures
 * change (URMA-API.md §5): the generation is told by probing symbols (§2.5).
 * jetrpc is built for the 25.12 / master layout of the structures it passes
 * (urma_sge_t 32 bytes, urma_rjetty_t 48); a 24.12 library (no
 * urma_import_jetty_ex: 24-byte SGEs, 40-byte remote jetties) and a B081
 * build (urma_alloc_jfc without urma_get_rjetty: 72-byte remote jetties)
 * would read those wrongly, so they are refused with the reason, and URMA
 * is unavailable. Mainline builds of 2026-06-16..24 carry master's symbols
 * with B081's remote jetty and cannot be told apart by symbols.
 *
 * The table is filled once and read without locks afterwards. */
#ifndef JET_URMA_LOADER_H
#define JET_URMA_LOADER_H

#include <stdbool.h>
#include <stddef.h>

#include "urma/urma_api.h"

typedef struct jet_urma_fns {
#define JET_URMA_FN_(ret, name, params) ret(*name) params;
    URMA_API_FUNCS(JET_URMA_FN_)
#undef JET_URMA_FN_
} jet_urma_fns_t;

typedef struct jet_urma_lib {
    void *handle;
    char path[256]; /* the name that loaded */
    jet_urma_fns_t fn;
    bool master_layout; /* a master-generation symbol is present (§2.5 probing) */
    const char *generation; /* "master" or "25.12" */
} jet_urma_lib_t;

/* Loads the library: path (the urma_lib flag) when non-empty, else the
 * standard names. On failure returns a negative code and writes a one-line
 * reason into why. */
int jet__urma_lib_load(const char *path, jet_urma_lib_t *lib, char *why, size_t why_len);

#endif
