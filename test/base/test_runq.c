/* base/runq: the count of runnable threads read from a file of
 * /proc/loadavg's format (a temporary file here, so that the machine's own
 * load cannot change the outcome), the three-readings rule, the once-a-
 * millisecond reading, malformed or missing sources, and the real file. */
#include "base/runq.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "testutil.h"

static char g_path[64];

static void put(const char *text)
{
    FILE *f = fopen(g_path, "w");
    if (!f) abort();
    fputs(text, f);
    fclose(f);
}

static void put_runnable(long n)
{
    char line[96];
    snprintf(line, sizeof line, "0.50 0.40 0.30 %ld/321 4242\n", n);
    put(line);
}

static void test_reads_the_count(void)
{
    put_runnable(1);
    jet__runq_set_source(g_path);
    JT_CHECK(jet__runq_has_room(1000000));
    int r = 0, c = 0;
    jet__runq_last(&r, &c);
    JT_CHECK_EQ(r, 1);
    JT_CHECK_EQ(c, (int)sysconf(_SC_NPROCESSORS_ONLN));
}

static void test_three_readings_turn_it(void)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    put_runnable(cores + 3);
    jet__runq_set_source(g_path);
    int64_t t = 5000000;
    JT_CHECK(jet__runq_has_room(t));        /* one excess reading */
    JT_CHECK(jet__runq_has_room(t + 1000)); /* two */
    JT_CHECK(!jet__runq_has_room(t + 2000)); /* three in a row */
    /* Within the millisecond the last answer stands, whatever the file says. */
    put_runnable(1);
    JT_CHECK(!jet__runq_has_room(t + 2500));
    /* The first reading without excess gives the room back. */
    JT_CHECK(jet__runq_has_room(t + 3000));
    /* An excess that does not last is not counted. */
    put_runnable(cores + 1);
    JT_CHECK(jet__runq_has_room(t + 4000));
    JT_CHECK(jet__runq_has_room(t + 5000));
    put_runnable(cores);
    JT_CHECK(jet__runq_has_room(t + 6000));
    put_runnable(cores + 1);
    JT_CHECK(jet__runq_has_room(t + 7000));
    JT_CHECK(jet__runq_has_room(t + 8000));
    JT_CHECK(!jet__runq_has_room(t + 9000));
}

static void test_unreadable_means_room(void)
{
    static const char *const bad[] = {"",
                                      "garbage\n",
                                      "0.1 0.2 0.3\n",
                                      "0.1 0.2 0.3 x/10 1\n",
                                      "0.1 0.2 0.3 12 1\n",
                                      "0.1 0.2 0.3 -4/10 1\n",
                                      "0.1 0.2 0.3 99999999999999999999/10 1\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put(bad[i]);
        jet__runq_set_source(g_path);
        JT_CHECK_AT(bad[i], jet__runq_has_room(1000));
        int r = 0, c = 0;
        jet__runq_last(&r, &c);
        JT_CHECK_EQ(r, -1);
    }
    /* A line longer than the reader's buffer: cut, never overrun. */
    char longline[400];
    for (size_t i = 0; i < sizeof longline - 1; i++)
        longline[i] = '7';
    longline[sizeof longline - 1] = 0;
    put(longline);
    jet__runq_set_source(g_path);
    JT_CHECK(jet__runq_has_room(1000));
    jet__runq_set_source("/nonexistent/loadavg");
    JT_CHECK(jet__runq_has_room(1000));
    JT_CHECK(jet__runq_has_room(2000));
}

static void test_real_file(void)
{
    jet__runq_set_source(NULL);
    (void)jet__runq_has_room(1000);
    int r = 0, c = 0;
    jet__runq_last(&r, &c);
    JT_CHECK(r >= 1); /* the reader itself is running */
    JT_CHECK(c >= 1);
}

int main(void)
{
    snprintf(g_path, sizeof g_path, "/tmp/jt-runq-%d", (int)getpid());
    JT_RUN(test_reads_the_count);
    JT_RUN(test_three_readings_turn_it);
    JT_RUN(test_unreadable_means_room);
    JT_RUN(test_real_file);
    unlink(g_path);
    return jt_finish();
}
