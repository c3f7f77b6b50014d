/* The liburma loader: a provider with every minimal symbol loads (softub,
 * built next to the tests), a missing file, a library without the URMA
 * symbols and the generations whose structures differ are refused with a
 * reason, and nothing is half-loaded. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "urma/urma_context.h"
#include "urma/urma_loader.h"

static void test_loads_softub(void)
{
    const char *path = getenv("SOFTUB_LIB");
    JT_REQUIRE(path && *path); /* set by ctest whenever softub is built */
    jet_urma_lib_t lib;
    char why[256] = "";
    int rc = jet__urma_lib_load(path, &lib, why, sizeof why);
    if (rc < 0) fprintf(stderr, "  %s\n", why);
    JT_REQUIRE(rc == 0);
    JT_CHECK(strcmp(lib.path, path) == 0);
#define CHECK_MIN_(ret, name, params) JT_CHECK(lib.fn.name != NULL);
    URMA_API_MINIMAL(CHECK_MIN_)
#undef CHECK_MIN_
    JT_CHECK(lib.master_layout);
    JT_CHECK(strcmp(lib.generation, "master") == 0);
    /* The table calls into the provider. */
    urma_eid_t eid;
    JT_CHECK_EQ(lib.fn.urma_str_to_eid("10.1.2.3", &eid), 0);
    JT_CHECK(eid.raw[10] == 0xff && eid.raw[11] == 0xff && eid.raw[12] == 10 && eid.raw[15] == 3);
}

static void test_missing_file(void)
{
    jet_urma_lib_t lib;
    char why[256] = "";
    JT_CHECK_EQ(jet__urma_lib_load("/nonexistent/liburma.so.0", &lib, why, sizeof why), -ENOENT);
    JT_CHECK(strstr(why, "cannot load liburma") != NULL);
    JT_CHECK(lib.handle == NULL);
}

static void test_library_without_symbols(void)
{
    jet_urma_lib_t lib;
    char why[256] = "";
    /* libz is on every machine that builds jetrpc and exports no urma_*. */
    JT_CHECK_EQ(jet__urma_lib_load("libz.so.1", &lib, why, sizeof why), -ENOENT);
    JT_CHECK(strstr(why, "lacks the symbol urma_init") != NULL);
    JT_CHECK(lib.handle == NULL);
}

/* A fake library of each generation (built next to the tests): 25.12 loads,
 * 24.12 and B081 are refused with the reason, nothing stays loaded. */
static void test_generations(void)
{
    static const struct {
        const char *env, *gen, *why;
    } cases[] = {
        {"FAKE_URMA_2512", "25.12", NULL},
        {"FAKE_URMA_2412", NULL, "24.12 generation"},
        {"FAKE_URMA_B081", NULL, "B081-generation"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = getenv(cases[i].env);
        JT_REQUIRE(path && *path); /* set by ctest */
        jet_urma_lib_t lib;
        char why[512] = "";
        int rc = jet__urma_lib_load(path, &lib, why, sizeof why);
        if (cases[i].gen) {
            JT_CHECK_EQ(rc, 0);
            JT_CHECK(!lib.master_layout);
            JT_CHECK(lib.generation && strcmp(lib.generation, cases[i].gen) == 0);
        } else {
            JT_CHECK_EQ(rc, -ENOTSUP);
            JT_CHECK(strstr(why, cases[i].why) != NULL);
            JT_CHECK(strstr(why, path) != NULL);
            JT_CHECK(lib.handle == NULL);
        }
    }
}

/* brpc's choice of the JFS priority: the entry whose transport-path mask is
 * exactly the path used (a mask with more paths does not count), else 6; a
 * provider of the older layout has no table. */
static void test_priority_for_path(void)
{
    urma_device_attr_t a;
    memset(&a, 0, sizeof a);
    JT_CHECK_EQ(jet__urma_priority(&a, true, URMA_CTP), 6);
    a.dev_cap.priority_info[1].tp_type.bs.ctp = 1;
    a.dev_cap.priority_info[1].tp_type.bs.rtp = 1; /* both: not exactly CTP */
    a.dev_cap.priority_info[3].tp_type.bs.ctp = 1;
    a.dev_cap.priority_info[4].tp_type.bs.rtp = 1;
    a.dev_cap.priority_info[9].tp_type.bs.utp = 1;
    JT_CHECK_EQ(jet__urma_priority(&a, true, URMA_CTP), 3);
    JT_CHECK_EQ(jet__urma_priority(&a, true, URMA_RTP), 4);
    JT_CHECK_EQ(jet__urma_priority(&a, true, URMA_UTP), 9);
    JT_CHECK_EQ(jet__urma_priority(&a, false, URMA_CTP), 6);
    /* The last entry counts too; the first match wins. */
    memset(&a, 0, sizeof a);
    a.dev_cap.priority_info[URMA_MAX_PRIORITY].tp_type.bs.ctp = 1;
    JT_CHECK_EQ(jet__urma_priority(&a, true, URMA_CTP), URMA_MAX_PRIORITY);
    a.dev_cap.priority_info[0].tp_type.bs.ctp = 1;
    JT_CHECK_EQ(jet__urma_priority(&a, true, URMA_CTP), 0);
}

int main(void)
{
    JT_RUN(test_loads_softub);
    JT_RUN(test_missing_file);
    JT_RUN(test_library_without_symbols);
    JT_RUN(test_generations);
    JT_RUN(test_priority_for_path);
    return jt_finish();
}
