/* The liburma loader: a provider with every minimal symbol loads (softub,
 * built next to the tests), a missing file, a library without the URMA
 * symbols and the generations whose structures differ are refused with a
 * reason, and nothing is half-loaded; with no urma_lib the standard names
 * are tried in order (liburma.so.0, then liburma.so). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "testutil_transport.h"
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

/* The child of test_default_names (role=default-names, argv: the name and
 * generation expected, or "error"): loads with an empty urma_lib. Exit
 * status 0 when the outcome is the expected one; 2 when "error" was
 * expected and a liburma of the system loaded. */
static int default_names_child(const char *want_path, const char *want_gen)
{
    jet_urma_lib_t lib;
    char why[512] = "";
    int rc = jet__urma_lib_load("", &lib, why, sizeof why);
    if (rc == 0 && strcmp(want_path, "error") == 0) return 2; /* the system's liburma */
    if (rc < 0) {
        if (strcmp(want_path, "error") == 0 && strstr(why, "cannot load liburma") &&
            strstr(why, "liburma.so.0") && strstr(why, "liburma.so:"))
            return 0;
        fprintf(stderr, "  expected %s %s, got: %s\n", want_path, want_gen, why);
        return 1;
    }
    if (strcmp(lib.path, want_path) == 0 && strcmp(lib.generation, want_gen) == 0) return 0;
    fprintf(stderr, "  expected %s %s, got %s %s\n", want_path, want_gen, lib.path, lib.generation);
    return 1;
}

/* Runs default_names_child with LD_LIBRARY_PATH=dir (the dynamic loader
 * reads it only at start): its exit status. */
static int default_names_in(const char *dir, const char *want_path, const char *want_gen)
{
    char env[128];
    snprintf(env, sizeof env, "LD_LIBRARY_PATH=%s", dir);
    const char *args[] = {want_path, want_gen, NULL}, *envs[] = {env, NULL};
    return jt_run_role("role=default-names", args, envs, 20000);
}

/* No urma_lib: liburma.so.0 is taken before liburma.so, liburma.so when it
 * is the only one, and a failure names both. (The files are links to softub
 * and to the 25.12 fake, told apart by their generation.) */
static void test_default_names(void)
{
    const char *softub = getenv("SOFTUB_LIB"), *fake = getenv("FAKE_URMA_2512");
    JT_REQUIRE(softub && *softub && fake && *fake);
    char dir[] = "/tmp/jet-loader-XXXXXX", so[64], so0[64];
    JT_REQUIRE(mkdtemp(dir) != NULL);
    snprintf(so, sizeof so, "%s/liburma.so", dir);
    snprintf(so0, sizeof so0, "%s/liburma.so.0", dir);

    /* A machine with liburma installed finds it in the system's paths (2). */
    int rc = default_names_in(dir, "error", "-");
    JT_CHECK(rc == 0 || rc == 2);

    JT_REQUIRE(symlink(softub, so) == 0);
    JT_CHECK_EQ(default_names_in(dir, "liburma.so", "master"), 0);

    JT_REQUIRE(symlink(fake, so0) == 0);
    JT_CHECK_EQ(default_names_in(dir, "liburma.so.0", "25.12"), 0);

    unlink(so0);
    unlink(so);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    jt_self_init();
    if (argc > 3 && strcmp(argv[1], "role=default-names") == 0)
        return default_names_child(argv[2], argv[3]);
    JT_RUN(test_loads_softub);
    JT_RUN(test_missing_file);
    JT_RUN(test_library_without_symbols);
    JT_RUN(test_generations);
    JT_RUN(test_default_names);
    JT_RUN(test_priority_for_path);
    return jt_finish();
}
