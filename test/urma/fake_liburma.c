/* Fake liburma builds for the loader's generation probe: every minimal
 * function as a stub (never called), plus the symbols by which a real
 * library's generation is told (URMA-API.md §2.5), chosen at compile time:
 * FAKE_GEN_2412 (none of them), FAKE_GEN_2512 (urma_import_jetty_ex),
 * FAKE_GEN_B081 (urma_import_jetty_ex and urma_alloc_jfc). */
#include "urma/urma_api.h"

#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

/* A stub's answer: zero of its return type (nothing for void). */
#define FAKE_STUB_(ret, name, params)                                                              \
    ret name params { return (ret)0; }
URMA_API_MINIMAL(FAKE_STUB_)
#undef FAKE_STUB_

#if defined(FAKE_GEN_2512) || defined(FAKE_GEN_B081)
urma_target_jetty_t *urma_import_jetty_ex(urma_context_t *ctx, urma_rjetty_t *rjetty,
                                          urma_token_t *token_value, urma_import_jetty_ex_cfg_t *cfg)
{
    return NULL;
}
#endif
#if defined(FAKE_GEN_B081)
int urma_alloc_jfc(void) { return 0; }
#endif
