/* Flags registry: every command-line syntax, environment order, validation,
 * argv rewriting, duplicates, --help and changes while other threads read. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jetrpc/flags.h"
#include "testutil.h"

JET_FLAG_DEFINE_BOOL(tf_bool, false, "a test bool");
JET_FLAG_DEFINE_INT32(tf_i32, 7, "a test int32");
JET_FLAG_DEFINE_INT64(tf_i64, -5, "a test int64");
JET_FLAG_DEFINE_DOUBLE(tf_dbl, 1.5, "a test double");
JET_FLAG_DEFINE_STRING(tf_str, "hello", "a test string");
JET_FLAG_DEFINE_INT32_RANGE(tf_r32, 5, 1, 10, "a test int32 in [1, 10]");
JET_FLAG_DEFINE_INT64_RANGE(tf_r64, -3, -10, INT64_C(1) << 40, "a test int64 with a range");
/* Named like the negation of another flag: the exact name must win. */
JET_FLAG_DEFINE_BOOL(notf_real, true, "a bool whose name starts with no");

/* Set by the re-executed child through the environment only (see main). */
#define CHILD_ENV_MARK "child:env"
#define CHILD_BAD_ENV_MARK "child:bad-env"

static void reset_flags(void)
{
    JT_CHECK_EQ(jet_flag_set("tf_bool", "false"), 0);
    JT_CHECK_EQ(jet_flag_set("tf_i32", "7"), 0);
    JT_CHECK_EQ(jet_flag_set("tf_i64", "-5"), 0);
    JT_CHECK_EQ(jet_flag_set("tf_dbl", "1.5"), 0);
    JT_CHECK_EQ(jet_flag_set("tf_str", "hello"), 0);
    JT_CHECK_EQ(jet_flag_set("notf_real", "true"), 0);
    JT_CHECK_EQ(jet_flag_set("tf_r32", "5"), 0);
    JT_CHECK_EQ(jet_flag_set("tf_r64", "-3"), 0);
}

/* Runs jet_flags_parse on a copy of args; the copy (rewritten) goes to out. */
static int parse_args(int n, const char *const *args, int *argc_out, char **out)
{
    char *v[32];
    if (n >= 31) {
        JT_CHECK(!"too many arguments for parse_args");
        return -E2BIG;
    }
    for (int i = 0; i < n; i++)
        v[i] = (char *)args[i];
    v[n] = NULL;
    int argc = n;
    char **argv = v;
    int rc = jet_flags_parse(&argc, &argv);
    *argc_out = argc;
    for (int i = 0; i <= n; i++)
        out[i] = v[i];
    return rc;
}
#define PARSE(out, argc_p, ...)                                                                    \
    parse_args(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *),                             \
               (const char *[]){__VA_ARGS__}, (argc_p), (out))

/* Captures what fn writes to stderr (fd 2) into buf. */
static void capture_stderr(void (*fn)(void *), void *arg, char *buf, size_t cap)
{
    FILE *tmp = tmpfile();
    JT_REQUIRE(tmp);
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(buf, 1, cap - 1, tmp);
    buf[n] = '\0';
    fclose(tmp);
}

static void test_find(void)
{
    const jet_flag_t *f = jet_flag_find("tf_i32");
    JT_REQUIRE(f);
    JT_CHECK_EQ(f->type, JET_FLAG_TYPE_INT32);
    JT_CHECK(strcmp(f->name, "tf_i32") == 0);
    JT_CHECK(strcmp(f->help, "a test int32") == 0);
    JT_CHECK(f->ptr == &JET_FLAG_VAR(tf_i32));
    JT_CHECK(jet_flag_find("tf_str")->type == JET_FLAG_TYPE_STRING);
    JT_CHECK(jet_flag_find("no_such_flag") == NULL);
    JT_CHECK(jet_flag_find("tf_i3") == NULL); /* prefixes are not names */
    JT_CHECK(jet_flag_find("tf_i32x") == NULL);
    JT_CHECK(jet_flag_find(NULL) == NULL);
    JT_CHECK(jet_flag_find("log_level") == NULL ||
             jet_flag_find("log_level")->type == JET_FLAG_TYPE_INT32);
}

static void test_defaults(void)
{
    JT_CHECK(JET_FLAG(tf_bool) == false);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 7);
    JT_CHECK_EQ(JET_FLAG(tf_i64), -5);
    JT_CHECK(JET_FLAG(tf_dbl) == 1.5);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "hello") == 0);
}

static void test_set_bool(void)
{
    static const char *const yes[] = {"true", "1", "yes", "TRUE", "Yes"};
    static const char *const no[] = {"false", "0", "no", "FALSE", "No"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        JET_FLAG_STORE(tf_bool, false);
        JT_CHECK_EQ(jet_flag_set("tf_bool", yes[i]), 0);
        JT_CHECK(JET_FLAG(tf_bool) == true);
        JT_CHECK_EQ(jet_flag_set("tf_bool", no[i]), 0);
        JT_CHECK(JET_FLAG(tf_bool) == false);
    }
    static const char *const bad[] = {"", "2", "maybe", "truex", " true", "true ", "y", "-1"};
    JET_FLAG_STORE(tf_bool, true);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        JT_CHECK_EQ(jet_flag_set("tf_bool", bad[i]), -EINVAL);
        JT_CHECK(JET_FLAG(tf_bool) == true);
    }
    reset_flags();
}

static void test_set_int32(void)
{
    JT_CHECK_EQ(jet_flag_set("tf_i32", "2147483647"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 2147483647);
    JT_CHECK_EQ(jet_flag_set("tf_i32", "-2147483648"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), -2147483647 - 1);
    JT_CHECK_EQ(jet_flag_set("tf_i32", "+12"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 12);
    JT_CHECK_EQ(jet_flag_set("tf_i32", "0x10"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 16);
    JT_CHECK_EQ(jet_flag_set("tf_i32", "010"), 0); /* decimal, not octal */
    JT_CHECK_EQ(JET_FLAG(tf_i32), 10);
    JT_CHECK_EQ(jet_flag_set("tf_i32", "-0"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 0);

    JET_FLAG_STORE(tf_i32, 33);
    static const char *const bad[] = {"2147483648",
                                      "-2147483649",
                                      "99999999999999999999",
                                      "12abc",
                                      "",
                                      " 12",
                                      "12 ",
                                      "1.5",
                                      "abc",
                                      "0x",
                                      "+",
                                      "-",
                                      "--1",
                                      "0x1g",
                                      "1e3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = jet_flag_set("tf_i32", bad[i]);
        if (rc != -EINVAL) fprintf(stderr, "  accepted int32 '%s'\n", bad[i]);
        JT_CHECK_EQ(rc, -EINVAL);
        JT_CHECK_EQ(JET_FLAG(tf_i32), 33);
    }
    reset_flags();
}

static void test_set_int64(void)
{
    JT_CHECK_EQ(jet_flag_set("tf_i64", "9223372036854775807"), 0);
    JT_CHECK(JET_FLAG(tf_i64) == INT64_MAX);
    JT_CHECK_EQ(jet_flag_set("tf_i64", "-9223372036854775808"), 0);
    JT_CHECK(JET_FLAG(tf_i64) == INT64_MIN);
    JT_CHECK_EQ(jet_flag_set("tf_i64", "4294967296"), 0);
    JT_CHECK(JET_FLAG(tf_i64) == 4294967296LL);
    JT_CHECK_EQ(jet_flag_set("tf_i64", "9223372036854775808"), -EINVAL);
    JT_CHECK_EQ(jet_flag_set("tf_i64", "-9223372036854775809"), -EINVAL);
    JT_CHECK_EQ(jet_flag_set("tf_i64", "5x"), -EINVAL);
    JT_CHECK_EQ(jet_flag_set("tf_i64", ""), -EINVAL);
    JT_CHECK(JET_FLAG(tf_i64) == 4294967296LL);
    reset_flags();
}

static void test_set_double(void)
{
    JT_CHECK_EQ(jet_flag_set("tf_dbl", "2.25"), 0);
    JT_CHECK(JET_FLAG(tf_dbl) == 2.25);
    JT_CHECK_EQ(jet_flag_set("tf_dbl", "-1e3"), 0);
    JT_CHECK(JET_FLAG(tf_dbl) == -1000.0);
    JT_CHECK_EQ(jet_flag_set("tf_dbl", "7"), 0);
    JT_CHECK(JET_FLAG(tf_dbl) == 7.0);
    static const char *const bad[] = {"",       "abc", "1.5x", " 1.5", "1e400",
                                      "-1e400", "nan", "inf",  "-inf", "1..2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = jet_flag_set("tf_dbl", bad[i]);
        if (rc != -EINVAL) fprintf(stderr, "  accepted double '%s'\n", bad[i]);
        JT_CHECK_EQ(rc, -EINVAL);
        JT_CHECK(JET_FLAG(tf_dbl) == 7.0);
    }
    reset_flags();
}

static void test_set_string(void)
{
    const char *literal = JET_FLAG(tf_str);
    JT_CHECK_EQ(jet_flag_set("tf_str", "world"), 0);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "world") == 0);
    JT_CHECK(JET_FLAG(tf_str) != literal);
    /* The registry copies: the caller's buffer may change afterwards. */
    char buf[16] = "abc";
    JT_CHECK_EQ(jet_flag_set("tf_str", buf), 0);
    strcpy(buf, "xyz");
    JT_CHECK(strcmp(JET_FLAG(tf_str), "abc") == 0);
    JT_CHECK_EQ(jet_flag_set("tf_str", ""), 0);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "") == 0);
    /* A value assigned directly is the program's: the registry must neither
     * free it nor lose its own previous copy (ASan checks both). */
    JET_FLAG_STORE(tf_str, "assigned");
    JT_CHECK_EQ(jet_flag_set("tf_str", "again"), 0);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "again") == 0);
    for (int i = 0; i < 100; i++)
        JT_CHECK_EQ(jet_flag_set("tf_str", "loop"), 0);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "loop") == 0);
    JT_CHECK_EQ(jet_flag_set("tf_str", NULL), -EINVAL);
    JT_CHECK_EQ(jet_flag_set("no_such_flag", "1"), -ENOENT);
    JT_CHECK_EQ(jet_flag_set(NULL, "1"), -EINVAL);
    reset_flags();
}

static void test_parse_syntaxes(void)
{
    char *out[32];
    int argc;
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_i32=5"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 5);
    JT_CHECK_EQ(argc, 1);
    JT_CHECK(strcmp(out[0], "prog") == 0 && out[1] == NULL);

    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_i32", "6"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 6);
    JT_CHECK_EQ(argc, 1);

    JT_CHECK_EQ(PARSE(out, &argc, "prog", "-tf_i32=8"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 8);
    JT_CHECK_EQ(argc, 1);

    JT_CHECK_EQ(PARSE(out, &argc, "prog", "-tf_i32", "9"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 9);
    JT_CHECK_EQ(argc, 1);

    /* A separate value may itself start with '-'. */
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_i64", "-77"), 0);
    JT_CHECK(JET_FLAG(tf_i64) == -77);

    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_bool"), 0);
    JT_CHECK(JET_FLAG(tf_bool) == true);
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--notf_bool"), 0);
    JT_CHECK(JET_FLAG(tf_bool) == false);
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "-tf_bool"), 0);
    JT_CHECK(JET_FLAG(tf_bool) == true);
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_bool=no"), 0);
    JT_CHECK(JET_FLAG(tf_bool) == false);
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_bool=yes"), 0);
    JT_CHECK(JET_FLAG(tf_bool) == true);
    /* A bare bool does not swallow the next argument. */
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--notf_bool", "false"), 0);
    JT_CHECK(JET_FLAG(tf_bool) == false);
    JT_CHECK_EQ(argc, 2);
    JT_CHECK(strcmp(out[1], "false") == 0);
    /* A flag literally named "no..." is matched by its own name first. */
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--notf_real=false"), 0);
    JT_CHECK(JET_FLAG(notf_real) == false);

    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_dbl=0.25", "--tf_str=a b=c"), 0);
    JT_CHECK(JET_FLAG(tf_dbl) == 0.25);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "a b=c") == 0);
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_str="), 0);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "") == 0);
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_str", "spaced value"), 0);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "spaced value") == 0);

    /* The last occurrence wins. */
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_i32=1", "--tf_i32=2"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 2);
    reset_flags();
}

static void test_parse_keeps_others(void)
{
    char *out[32];
    int argc;
    int rc = PARSE(out, &argc, "prog", "pos1", "--tf_i32=5", "pos2", "-x", "-", "--tf_str", "v",
                   "--", "--tf_i32=9", "--bogus", "tail");
    JT_CHECK_EQ(rc, 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 5);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "v") == 0);
    static const char *const want[] = {"prog", "pos1",       "pos2",    "-x",  "-",
                                       "--",   "--tf_i32=9", "--bogus", "tail"};
    JT_REQUIRE(argc == (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < argc; i++)
        JT_CHECK(strcmp(out[i], want[i]) == 0);
    JT_CHECK(out[argc] == NULL);

    /* Nothing to do. */
    JT_CHECK_EQ(PARSE(out, &argc, "prog"), 0);
    JT_CHECK_EQ(argc, 1);
    int zero = 0;
    char *none[] = {NULL};
    char **pnone = none;
    JT_CHECK_EQ(jet_flags_parse(&zero, &pnone), 0);
    JT_CHECK_EQ(zero, 0);
    JT_CHECK_EQ(jet_flags_parse(NULL, &pnone), -EINVAL);
    reset_flags();
}

struct parse_call {
    int n;
    const char *const *args;
    int rc, argc;
    char *out[32];
};

static void parse_call_fn(void *arg)
{
    struct parse_call *pc = arg;
    pc->rc = parse_args(pc->n, pc->args, &pc->argc, pc->out);
}

/* Parses args expecting -EINVAL, an error message naming `needle`, argv
 * untouched, and tf_i32 untouched. */
static void expect_parse_error(int n, const char *const *args, const char *needle)
{
    char err[4096];
    struct parse_call pc = {.n = n, .args = args};
    JET_FLAG_STORE(tf_i32, 41);
    capture_stderr(parse_call_fn, &pc, err, sizeof err);
    JT_CHECK_EQ(pc.rc, -EINVAL);
    JT_CHECK_EQ(pc.argc, n);
    for (int i = 0; i < n && i < 32; i++)
        JT_CHECK(pc.out[i] == args[i]);
    if (!strstr(err, needle)) fprintf(stderr, "  message '%s' lacks '%s'\n", err, needle);
    JT_CHECK(strstr(err, needle) != NULL);
}
#define EXPECT_PARSE_ERROR(needle, ...)                                                            \
    expect_parse_error(sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *),                     \
                       (const char *[]){__VA_ARGS__}, (needle))

static void test_parse_errors(void)
{
    EXPECT_PARSE_ERROR("--bogus_flag", "prog", "pos", "--bogus_flag=1");
    EXPECT_PARSE_ERROR("--bogus_flag", "prog", "--bogus_flag");
    EXPECT_PARSE_ERROR("tf_i32", "prog", "--tf_i32=abc");
    EXPECT_PARSE_ERROR("tf_i32", "prog", "--tf_i32=4294967296");
    EXPECT_PARSE_ERROR("tf_i32", "prog", "--tf_i32"); /* missing value */
    EXPECT_PARSE_ERROR("tf_bool", "prog", "--tf_bool=maybe");
    EXPECT_PARSE_ERROR("notf_bool", "prog", "--notf_bool=1");
    EXPECT_PARSE_ERROR("--notf_i32", "prog", "--notf_i32"); /* "no" only negates bools */
    EXPECT_PARSE_ERROR("--=3", "prog", "--=3");
    /* Arguments before the bad one were applied; the bad one was not. */
    EXPECT_PARSE_ERROR("--nope", "prog", "--tf_i64=3", "--nope", "--tf_i32=1");
    JT_CHECK(JET_FLAG(tf_i64) == 3);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 41);
    reset_flags();
}

/* A flag defined with a range takes the values in it, from every source,
 * and refuses the others with a message naming the range, unchanged. */
/* JET_FLAG_IN_RANGE reads a value stored past the range (JET_FLAG_STORE
 * does not check) as the nearest bound, and one inside it as it is. */
static void test_in_range(void)
{
    int32_t old32 = JET_FLAG(tf_r32);
    int64_t old64 = JET_FLAG(tf_r64);
    const int32_t stored32[] = {INT32_MIN, -1, 0, 1, 7, 10, 11, INT32_MAX};
    const int32_t read32[] = {1, 1, 1, 1, 7, 10, 10, 10};
    for (size_t i = 0; i < sizeof stored32 / sizeof stored32[0]; i++) {
        JET_FLAG_STORE(tf_r32, stored32[i]);
        JT_CHECK_EQ(JET_FLAG_IN_RANGE(tf_r32), read32[i]);
    }
    JET_FLAG_STORE(tf_r64, INT64_MIN);
    JT_CHECK_EQ(JET_FLAG_IN_RANGE(tf_r64), -10);
    JET_FLAG_STORE(tf_r64, INT64_C(-7));
    JT_CHECK_EQ(JET_FLAG_IN_RANGE(tf_r64), -7);
    JET_FLAG_STORE(tf_r64, INT64_MAX);
    JT_CHECK_EQ(JET_FLAG_IN_RANGE(tf_r64), INT64_C(1) << 40);
    JET_FLAG_STORE(tf_r32, old32);
    JET_FLAG_STORE(tf_r64, old64);
}

static void test_ranges(void)
{
    JT_CHECK_EQ(JET_FLAG(tf_r32), 5);
    JT_CHECK_EQ(jet_flag_set("tf_r32", "1"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_r32), 1);
    JT_CHECK_EQ(jet_flag_set("tf_r32", "10"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_r32), 10);
    const char *bad32[] = {"0", "11", "-1", "2147483647", "-2147483648", "0x7fffffff"};
    for (size_t i = 0; i < sizeof bad32 / sizeof bad32[0]; i++) {
        JT_CHECK_EQ(jet_flag_set("tf_r32", bad32[i]), -EINVAL);
        JT_CHECK_EQ(JET_FLAG(tf_r32), 10);
    }
    JT_CHECK_EQ(jet_flag_set("tf_r64", "-10"), 0);
    JT_CHECK_EQ(jet_flag_set("tf_r64", "1099511627776"), 0);
    JT_CHECK(JET_FLAG(tf_r64) == INT64_C(1) << 40);
    JT_CHECK_EQ(jet_flag_set("tf_r64", "1099511627777"), -EINVAL);
    JT_CHECK_EQ(jet_flag_set("tf_r64", "-11"), -EINVAL);
    JT_CHECK_EQ(jet_flag_set("tf_r64", "-9223372036854775808"), -EINVAL);
    JT_CHECK(JET_FLAG(tf_r64) == INT64_C(1) << 40);
    /* Flags without a range keep their type's whole range. */
    JT_CHECK_EQ(jet_flag_set("tf_i32", "-2147483648"), 0);
    JT_CHECK_EQ(jet_flag_set("tf_i64", "9223372036854775807"), 0);

    EXPECT_PARSE_ERROR("--tf_r32 (expected int32 in [1, 10])", "prog", "--tf_r32=0");
    EXPECT_PARSE_ERROR("in [1, 10]", "prog", "--tf_r32", "11");
    EXPECT_PARSE_ERROR("in [-10, 1099511627776]", "prog", "--tf_r64=2000000000000");
    JT_CHECK_EQ(JET_FLAG(tf_r32), 10);
    setenv("JETRPC_TF_R32", "-4", 1);
    EXPECT_PARSE_ERROR("JETRPC_TF_R32 for flag --tf_r32 (expected int32 in [1, 10])", "prog");
    unsetenv("JETRPC_TF_R32");
    JT_CHECK_EQ(JET_FLAG(tf_r32), 10);
    /* In range from the command line and the environment. */
    char *out[32];
    int argc;
    setenv("JETRPC_TF_R32", "2", 1);
    JT_CHECK_EQ(PARSE(out, &argc, "prog"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_r32), 2);
    unsetenv("JETRPC_TF_R32");
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_r32", "3"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_r32), 3);
    JT_CHECK_EQ(argc, 1);
    reset_flags();
    JT_CHECK_EQ(jet_flag_set("tf_i32", "7"), 0);
    JT_CHECK_EQ(jet_flag_set("tf_i64", "-5"), 0);
}

static void register_fn(void *arg)
{
    jet_flag_register(arg);
}

/* Records written by hand: zero bounds mean the whole range; an empty range
 * is refused at registration. */
static void test_register_ranges(void)
{
    static int32_t plain = 1, empty = 1;
    static jet_flag_t plain_rec = {.name = "tf_hand_plain",
                                   .type = JET_FLAG_TYPE_INT32,
                                   .ptr = &plain,
                                   .help = "by hand",
                                   .default_text = "1"};
    static jet_flag_t empty_rec = {.name = "tf_hand_empty",
                                   .type = JET_FLAG_TYPE_INT32,
                                   .ptr = &empty,
                                   .help = "by hand",
                                   .default_text = "1",
                                   .min = 5,
                                   .max = 4};
    jet_flag_register(&plain_rec);
    JT_CHECK_EQ(jet_flag_set("tf_hand_plain", "-2147483648"), 0);
    JT_CHECK_EQ(plain, INT32_MIN);
    char err[1024];
    capture_stderr(register_fn, &empty_rec, err, sizeof err);
    JT_CHECK(strstr(err, "--tf_hand_empty has an empty range [5, 4]") != NULL);
    JT_CHECK(jet_flag_find("tf_hand_empty") == NULL);
    JT_CHECK_EQ(jet_flag_set("tf_hand_empty", "5"), -ENOENT);
}

static void test_env_order(void)
{
    char *out[32];
    int argc;
    setenv("JETRPC_TF_I32", "11", 1);
    setenv("JETRPC_TF_STR", "from env", 1);
    setenv("JETRPC_TF_BOOL", "yes", 1);
    JT_CHECK_EQ(PARSE(out, &argc, "prog"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 11);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "from env") == 0);
    JT_CHECK(JET_FLAG(tf_bool) == true);
    /* The command line overrides the environment. */
    JT_CHECK_EQ(PARSE(out, &argc, "prog", "--tf_i32=12", "--notf_bool"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 12);
    JT_CHECK(JET_FLAG(tf_bool) == false);
    JT_CHECK(strcmp(JET_FLAG(tf_str), "from env") == 0);
    /* The variable name is the flag name upper-cased, nothing looser. */
    unsetenv("JETRPC_TF_I32");
    setenv("JETRPC_tf_i32", "13", 1);
    JT_CHECK_EQ(PARSE(out, &argc, "prog"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 12);
    unsetenv("JETRPC_tf_i32");
    unsetenv("JETRPC_TF_STR");
    unsetenv("JETRPC_TF_BOOL");

    /* A bad environment value fails the parse and names the variable. */
    setenv("JETRPC_TF_I64", "lots", 1);
    EXPECT_PARSE_ERROR("JETRPC_TF_I64", "prog", "--tf_i32=1");
    unsetenv("JETRPC_TF_I64");
    /* Unrelated JETRPC_ variables are ignored. */
    setenv("JETRPC_NOT_A_FLAG", "x", 1);
    JT_CHECK_EQ(PARSE(out, &argc, "prog"), 0);
    unsetenv("JETRPC_NOT_A_FLAG");
    reset_flags();
}

/* The environment is applied at registration, before main(), for programs
 * that never call jet_flags_parse: checked in a re-executed copy. */
static void test_env_without_parse(void)
{
    pid_t pid = fork();
    JT_REQUIRE(pid >= 0);
    if (pid == 0) {
        setenv("JETRPC_TF_I64", "4242", 1);
        setenv("JETRPC_TF_R32", "99", 1); /* out of range: refused, the default stays */
        execl("/proc/self/exe", "test_flags", CHILD_ENV_MARK, (char *)NULL);
        _exit(127);
    }
    JT_CHECK_EQ(jt_wait(pid), 0);
}

/* A bad environment value is checked at registration and again by
 * jet_flags_parse, which fails on it: one line says so, not two. */
static void test_bad_env_reported_once(void)
{
    char path[] = "/tmp/jt_flags_errXXXXXX";
    int fd = mkstemp(path);
    JT_REQUIRE(fd >= 0);
    pid_t pid = fork();
    JT_REQUIRE(pid >= 0);
    if (pid == 0) {
        dup2(fd, 2);
        setenv("JETRPC_TF_I64", "lots", 1);
        execl("/proc/self/exe", "test_flags", CHILD_BAD_ENV_MARK, (char *)NULL);
        _exit(127);
    }
    JT_CHECK_EQ(jt_wait(pid), 0);
    char err[4096] = {0};
    ssize_t n = pread(fd, err, sizeof err - 1, 0);
    close(fd);
    unlink(path);
    JT_REQUIRE(n > 0);
    int lines = 0;
    for (const char *p = err; (p = strstr(p, "JETRPC_TF_I64")) != NULL; p++)
        lines++;
    JT_CHECK_EQ(lines, 1);
}

static void test_duplicate(void)
{
    static int32_t other = 99;
    static jet_flag_t dup = {.name = "tf_i32",
                             .type = JET_FLAG_TYPE_INT32,
                             .ptr = &other,
                             .help = "dup",
                             .default_text = "99",
                             .file = "elsewhere.c"};
    char err[1024];
    capture_stderr(register_fn, &dup, err, sizeof err);
    JT_CHECK(strstr(err, "tf_i32") != NULL);
    JT_CHECK(strstr(err, "elsewhere.c") != NULL);
    JT_CHECK(jet_flag_find("tf_i32")->ptr == &JET_FLAG_VAR(tf_i32));
    JT_CHECK_EQ(jet_flag_set("tf_i32", "3"), 0);
    JT_CHECK_EQ(JET_FLAG(tf_i32), 3);
    JT_CHECK_EQ(other, 99);
    reset_flags();
}

static char *help_text(void)
{
    FILE *tmp = tmpfile();
    if (!tmp) return NULL;
    jet_flags_print_help(tmp);
    long len = ftell(tmp);
    rewind(tmp);
    char *s = calloc(1, (size_t)len + 1);
    if (s && fread(s, 1, (size_t)len, tmp) != (size_t)len) s[0] = '\0';
    fclose(tmp);
    return s;
}

static void test_help(void)
{
    JT_CHECK_EQ(jet_flag_set("tf_i32", "12"), 0);
    char *s = help_text();
    JT_REQUIRE(s);
    JT_CHECK(strstr(s, "--tf_i32=12 (default: 7)  a test int32\n") != NULL);
    JT_CHECK(strstr(s, "--tf_bool=false (default: false)  a test bool\n") != NULL);
    JT_CHECK(strstr(s, "--tf_i64=-5 (default: -5)  a test int64\n") != NULL);
    JT_CHECK(strstr(s, "--tf_r32=5 (default: 5) [1, 10]  a test int32 in [1, 10]\n") != NULL);
    JT_CHECK(strstr(s, "--tf_r64=-3 (default: -3) [-10, 1099511627776]  a test") != NULL);
    JT_CHECK(strstr(s, "--tf_dbl=1.5 (default: 1.5)") != NULL);
    JT_CHECK(strstr(s, "--tf_str=\"hello\" (default: \"hello\")  a test string\n") != NULL);
    /* Sorted by name. */
    const char *order[] = {
        "--notf_real=", "--tf_bool=", "--tf_dbl=", "--tf_i32=", "--tf_i64=", "--tf_str="};
    for (size_t i = 0; i + 1 < sizeof order / sizeof order[0]; i++) {
        const char *a = strstr(s, order[i]), *b = strstr(s, order[i + 1]);
        JT_CHECK(a && b && a < b);
    }
    free(s);
    reset_flags();
}

static void test_help_exits(void)
{
    /* The child's stdout goes to a file the parent reads back afterwards. */
    char path[] = "/tmp/jet_test_flags_help_XXXXXX";
    int fd = mkstemp(path);
    JT_REQUIRE(fd >= 0);
    fflush(stdout);
    int saved = dup(1);
    dup2(fd, 1);
    pid_t pid = fork();
    if (pid == 0) {
        char *v[] = {"prog", "--tf_i32=21", "--help", "pos", NULL};
        int argc = 4;
        char **argv = v;
        jet_flags_parse(&argc, &argv);
        _exit(102); /* --help must exit */
    }
    dup2(saved, 1);
    close(saved);
    JT_REQUIRE(pid > 0);
    JT_CHECK_EQ(jt_wait(pid), 0);
    size_t len = 0;
    char *s = jt_read_file(path, &len);
    unlink(path);
    close(fd);
    JT_REQUIRE(s);
    s = realloc(s, len + 1);
    JT_REQUIRE(s);
    s[len] = '\0';
    JT_CHECK(strstr(s, "--tf_i32=21 (default: 7)") != NULL); /* shows the new value */
    JT_CHECK(strstr(s, "--tf_str=\"hello\"") != NULL);
    free(s);
}

typedef struct reader {
    _Atomic bool stop;
    _Atomic long reads;
    long torn;
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    while (!atomic_load(&r->stop)) {
        const char *s = JET_FLAG(tf_str);
        int64_t v = JET_FLAG(tf_i64);
        if ((strcmp(s, "one") != 0 && strcmp(s, "two") != 0) ||
            (v != 1 && v != INT64_C(-0x0123456789abcdef)))
            r->torn++;
        atomic_fetch_add(&r->reads, 1);
    }
    return NULL;
}

/* Flags change at run time: a value read earlier stays valid after the flag
 * moved on (ASan), and a thread reading meanwhile sees the old or the new
 * value, never a torn or freed one (ThreadSanitizer, ASan). */
static void test_set_while_read(void)
{
    JT_CHECK_EQ(jet_flag_set("tf_str", "held"), 0);
    const char *held = JET_FLAG(tf_str);
    JT_CHECK_EQ(jet_flag_set("tf_str", "next"), 0);
    JT_CHECK(strcmp(held, "held") == 0);

    JT_CHECK_EQ(jet_flag_set("tf_str", "one"), 0);
    JT_CHECK_EQ(jet_flag_set("tf_i64", "1"), 0);
    reader_t r = {0};
    pthread_t th;
    JT_REQUIRE(pthread_create(&th, NULL, reader_main, &r) == 0);
    while (atomic_load(&r.reads) == 0)
        sched_yield();
    for (int i = 0; i < 20000; i++) {
        JT_CHECK_EQ(jet_flag_set("tf_str", i & 1 ? "one" : "two"), 0);
        JT_CHECK_EQ(jet_flag_set("tf_i64", i & 1 ? "1" : "-0x0123456789abcdef"), 0);
    }
    atomic_store(&r.stop, true);
    pthread_join(th, NULL);
    JT_CHECK_EQ(r.torn, 0);
    reset_flags();
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], CHILD_BAD_ENV_MARK) == 0) {
        int ac = 1;
        char *av0[] = {argv[0], NULL}, **av = av0;
        return jet_flags_parse(&ac, &av) == -EINVAL ? 0 : 1;
    }
    if (argc == 2 && strcmp(argv[1], CHILD_ENV_MARK) == 0)
        return JET_FLAG(tf_i64) == 4242 && JET_FLAG(tf_i32) == 7 && JET_FLAG(tf_r32) == 5 ? 0 : 1;
    JT_RUN(test_find);
    JT_RUN(test_defaults);
    JT_RUN(test_set_bool);
    JT_RUN(test_set_int32);
    JT_RUN(test_set_int64);
    JT_RUN(test_set_double);
    JT_RUN(test_set_string);
    JT_RUN(test_set_while_read);
    JT_RUN(test_parse_syntaxes);
    JT_RUN(test_parse_keeps_others);
    JT_RUN(test_parse_errors);
    JT_RUN(test_ranges);
    JT_RUN(test_in_range);
    JT_RUN(test_register_ranges);
    JT_RUN(test_env_order);
    JT_RUN(test_env_without_parse);
    JT_RUN(test_bad_env_reported_once);
    JT_RUN(test_duplicate);
    JT_RUN(test_help);
    JT_RUN(test_help_exits);
    return jt_finish();
}
