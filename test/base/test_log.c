/* Logging: one line per call, level filtering through the log_level flag,
 * truncation, whole lines from concurrent threads, the rate of lines a peer
 * can cause. stderr is captured into a tmpfile with dup2. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "testutil.h"

static jt_stderr_cap_t cap;

static void cap_begin(void)
{
    jt_stderr_begin(&cap);
}

/* Stops capturing; returns what was written (malloc'd, NUL-terminated). */
static char *cap_end(size_t *len_p)
{
    char *s = jt_stderr_end(&cap);
    if (len_p) *len_p = s ? strlen(s) : 0;
    return s;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void set_level(const char *v)
{
    JT_CHECK_EQ(jet_flag_set("log_level", v), 0);
}

static void test_one_line_per_call(void)
{
    set_level("0");
    cap_begin();
    JET_INFO("hello %d", 42);
    char *s = cap_end(NULL);
    JT_REQUIRE(s);
    JT_CHECK_EQ(count_lines(s), 1);
    JT_CHECK(s[0] == 'I');
    JT_CHECK(strstr(s, "test_log.c:") != NULL);
    JT_CHECK(strstr(s, "] hello 42\n") != NULL);
    free(s);

    /* A message's own trailing newline is not doubled. */
    cap_begin();
    JET_WARN("with newline\n");
    JET_ERROR("error text");
    JET_DEBUG("debug text");
    s = cap_end(NULL);
    JT_REQUIRE(s);
    JT_CHECK_EQ(count_lines(s), 3);
    JT_CHECK(strstr(s, "] with newline\nE") != NULL);
    char *e = strstr(s, "error text\n");
    JT_CHECK(e != NULL);
    JT_CHECK(strstr(s, "\nD") != NULL);
    free(s);
    set_level("1");
}

static void test_level_filter(void)
{
    set_level("2");
    JT_CHECK_EQ(JET_FLAG(log_level), 2);
    cap_begin();
    JET_DEBUG("no debug");
    JET_INFO("no info");
    JET_WARN("yes warn");
    JET_ERROR("yes error");
    char *s = cap_end(NULL);
    JT_REQUIRE(s);
    JT_CHECK_EQ(count_lines(s), 2);
    JT_CHECK(strstr(s, "no debug") == NULL);
    JT_CHECK(strstr(s, "no info") == NULL);
    JT_CHECK(strstr(s, "yes warn") != NULL);
    JT_CHECK(strstr(s, "yes error") != NULL);
    free(s);

    set_level("3");
    cap_begin();
    JET_WARN("no warn");
    JET_ERROR("only error");
    s = cap_end(NULL);
    JT_REQUIRE(s);
    JT_CHECK_EQ(count_lines(s), 1);
    JT_CHECK(strstr(s, "only error") != NULL);
    free(s);

    /* Bad levels are refused and leave the level alone. */
    JT_CHECK(jet_flag_set("log_level", "warn") < 0);
    JT_CHECK_EQ(JET_FLAG(log_level), 3);
    set_level("1");
}

static void test_log_once(void)
{
    set_level("1");
    cap_begin();
    for (int i = 0; i < 5; i++)
        JET_LOG_ONCE(JET_LOG_WARN, "once %d", i);
    char *s = cap_end(NULL);
    JT_REQUIRE(s);
    JT_CHECK_EQ(count_lines(s), 1);
    JT_CHECK(strstr(s, "once 0") != NULL);
    free(s);
}

static void test_long_message(void)
{
    char *big = malloc(5000);
    JT_REQUIRE(big);
    memset(big, 'x', 4999);
    big[4999] = '\0';
    cap_begin();
    JET_INFO("%s", big);
    size_t len = 0;
    char *s = cap_end(&len);
    JT_REQUIRE(s);
    JT_CHECK_EQ(count_lines(s), 1);
    JT_CHECK(len <= 1024);
    JT_CHECK(len > 900);
    JT_CHECK(s[len - 1] == '\n');
    free(s);
    free(big);
}

enum { LOG_THREADS = 4, LOG_LINES = 2000 };

static void *log_worker(void *arg)
{
    int id = (int)(long)arg;
    for (int i = 0; i < LOG_LINES; i++)
        JET_INFO("thread %d line %d payload-%0100d-end", id, i, i);
    return NULL;
}

static void test_threads_whole_lines(void)
{
    set_level("1");
    cap_begin();
    pthread_t th[LOG_THREADS];
    for (long i = 0; i < LOG_THREADS; i++)
        JT_REQUIRE(pthread_create(&th[i], NULL, log_worker, (void *)i) == 0);
    for (int i = 0; i < LOG_THREADS; i++)
        pthread_join(th[i], NULL);
    char *s = cap_end(NULL);
    JT_REQUIRE(s);
    JT_CHECK_EQ(count_lines(s), LOG_THREADS * LOG_LINES);
    /* Every line is whole: starts with the level letter, ends with "-end". */
    int bad = 0, seen[LOG_THREADS] = {0};
    for (char *line = s, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) break;
        *nl = '\0';
        int id, n;
        const char *msg = strstr(line, "] thread ");
        if (line[0] != 'I' || !msg || sscanf(msg, "] thread %d line %d", &id, &n) != 2 || id < 0 ||
            id >= LOG_THREADS || nl - line < 5 || strcmp(nl - 4, "-end") != 0)
            bad++;
        else
            seen[id]++;
    }
    JT_CHECK_EQ(bad, 0);
    for (int i = 0; i < LOG_THREADS; i++)
        JT_CHECK_EQ(seen[i], LOG_LINES);
    free(s);
}

/* Lines a peer can cause: per call site, a burst of 10 x log_peer_rate,
 * then log_peer_rate a second; the next printed line counts the dropped
 * ones. Two call sites have a bucket each; 0 lifts the limit. */
static void peer_line(int i)
{
    JET_WARN_PEER("close peer-%d: bad bytes", i);
}

static void test_peer_lines_rate_limited(void)
{
    set_level("1");
    JT_CHECK_EQ(jet_flag_set("log_peer_rate", "1"), 0);
    cap_begin();
    for (int i = 0; i < 100; i++)
        peer_line(i);
    for (int i = 0; i < 3; i++)
        JET_INFO_PEER("declined peer-%d", i);             /* another site: its own burst */
    JET_LOG_PEER(JET_LOG_DEBUG, "below the level %d", 0); /* filtered, not counted */
    char *s = cap_end(NULL);
    JT_REQUIRE(s);
    JT_CHECK_EQ(count_lines(s), 13);
    JT_CHECK(strstr(s, "close peer-9: bad bytes\n") != NULL);
    JT_CHECK(strstr(s, "peer-10:") == NULL);
    JT_CHECK(strstr(s, "declined peer-2\n") != NULL);
    free(s);

    usleep(1100 * 1000); /* one line's worth of the rate */
    cap_begin();
    for (int i = 100; i < 103; i++)
        peer_line(i);
    s = cap_end(NULL);
    JT_REQUIRE(s);
    JT_CHECK_EQ(count_lines(s), 1);
    JT_CHECK(strstr(s, "close peer-100: bad bytes [90 more like this not logged: "
                       "--log_peer_rate]\n") != NULL);
    free(s);

    JT_CHECK_EQ(jet_flag_set("log_peer_rate", "0"), 0);
    cap_begin();
    for (int i = 0; i < 50; i++)
        peer_line(i);
    s = cap_end(NULL);
    JT_REQUIRE(s);
    JT_CHECK_EQ(count_lines(s), 50);
    free(s);
    JT_CHECK_EQ(jet_flag_set("log_peer_rate", "1"), 0);
}

int main(void)
{
    JT_RUN(test_one_line_per_call);
    JT_RUN(test_level_filter);
    JT_RUN(test_log_once);
    JT_RUN(test_long_message);
    JT_RUN(test_threads_whole_lines);
    JT_RUN(test_peer_lines_rate_limited);
    return jt_finish();
}
