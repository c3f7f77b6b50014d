/* tool_urma.h: the dlopen loader shared by softub_info and softub_perf.
 *
 * The tools link nothing URMA-related: they dlopen liburma ("liburma.so.0",
 * then "liburma.so", or an explicit path) and call it only through the
 * function table below, so one binary runs on softub (LD_LIBRARY_PATH=
 * <build>/softub/lib, or --lib=<build>/softub/libsoftub.so) and on a real
 * UB host. The prototypes come from src/urma/urma_api.h (master layout);
 * tu_open() probes symbols (URMA-API.md §2.5) to tell which generation the
 * library is, because the caller-allocated structs the tools hand over
 * (urma_sge_t, urma_rjetty_t, urma_device_attr_t) changed between
 * generations. */
#ifndef SOFTUB_TOOLS_TOOL_URMA_H
#define SOFTUB_TOOLS_TOOL_URMA_H

#include <limits.h>
#include <stdio.h>

#include "urma/urma_api.h"

typedef enum tu_gen {
    TU_GEN_2412 = 0, /* no urma_import_jetty_ex: sge 24 B, rjetty 40 B */
    TU_GEN_2512,     /* urma_import_jetty_ex: sge/rjetty as master, device_attr 368 B */
    TU_GEN_B081,     /* urma_alloc_jfc without urma_get_rjetty: rjetty 72 B */
    TU_GEN_MASTER,   /* urma_get_rjetty (or softub): the layout of urma_api.h */
} tu_gen_t;

typedef int (*tu_fabric_dump_fn)(FILE *out);

typedef struct tu_lib {
    void *handle;
    char name[PATH_MAX]; /* file the dynamic linker loaded (search result) */
    char real[PATH_MAX]; /* its realpath, e.g. .../libsoftub.so */
    tu_gen_t gen;
    int gen_forced;                /* gen came from --abi, not from probing */
    tu_fabric_dump_fn fabric_dump; /* softub only (optional export) */
#define TU_X(ret, name, params) ret(*name) params;
    URMA_API_FUNCS(TU_X)
#undef TU_X
} tu_lib_t;

/* Loads the library: `path` if non-NULL, else "liburma.so.0" then
 * "liburma.so", with RTLD_NOW | RTLD_GLOBAL (what UMDK's own loader uses;
 * the real liburma's plugins bind to its symbols). Resolves every name of
 * URMA_API_FUNCS that exists (missing ones stay NULL) and then checks the
 * NULL-terminated `required` list. `abi` is NULL (probe) or "master",
 * "25.12", "b081", "24.12". Returns 0, or a negative errno with a message
 * in err (the handle is closed again). Never dlclose a loaded liburma
 * before urma_uninit (URMA-API.md §4.13): tu_close() only after that. */
int tu_open(tu_lib_t *lib, const char *path, const char *abi, const char *const *required,
            char *err, size_t errlen);
void tu_close(tu_lib_t *lib);

const char *tu_gen_name(tu_gen_t gen);

/* The liburma status text, e.g. "URMA_EINVAL (22)". */
const char *tu_status_name(int status, char *buf, size_t len);
const char *tu_cr_status_name(int status);

/* 8 groups of 4 hex digits (EID_FMT) and, for IPv4-mapped EIDs, the
 * dotted address: buf needs 64 bytes. */
const char *tu_eid_str(const urma_eid_t *eid, char *buf, size_t len);

#endif
