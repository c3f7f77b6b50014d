/* Event mode with urma_event_spin_us: after a completion event the loop
 * polls its completion queue instead of arming it, for as long as
 * completions keep coming and the spin time after the last one; then it
 * arms the queue and sleeps on the event fd again; and not at all while
 * more threads are runnable than cores are online. The adaptive spin
 * (urma_event_spin_auto_us): its estimate of the gap between completion
 * batches, and a loop that spins once its completions come close together. Client and server share
 * the process, so every loop counted here is one of theirs. Echoes are
 * compared byte for byte in both regimes. The run-queue count comes from a
 * file this test writes (base/runq.h), not from the machine's load. */
#include "base/runq.h"
#include "base/time.h"
#include "urma/urma_context.h"
#include "urma_test.h"

#define GUARD_US (60 * 1000000LL)

typedef struct sums {
    uint64_t events, spins, completions;
    int spinning; /* loops in a spell of polling now */
} sums_t;

static sums_t totals(void)
{
    sums_t s;
    jet_urma_loop_stats_t t = ut_urma_totals(&s.spinning);
    s.events = t.events;
    s.spins = t.spins;
    s.completions = t.completions;
    return s;
}

static int g_port;
static char g_load[64];

/* The run-queue count the loops see from now on. */
static void set_runnable(long n)
{
    FILE *f = fopen(g_load, "w");
    if (!f) abort();
    fprintf(f, "0.50 0.40 0.30 %ld/321 4242\n", n);
    fclose(f);
}

static int echo_calls(jet_channel_t *ch, int n, size_t len, const char *tag)
{
    for (int i = 0; i < n; i++) {
        int rc = jt_echo_bytes(ch, len, (uint64_t)i * 131 + len, tag);
        if (rc != 0) return rc;
    }
    return 0;
}

/* No spin at all: every completion batch is an event, no spell of polling. */
static void test_pure_events(void)
{
    jet_flag_set("urma_event_spin_us", "0");
    jet_flag_set("urma_event_spin_auto_us", "0");
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(echo_calls(ch, 5, 100, "warm"), 0);
    sums_t a = totals();
    JT_CHECK_EQ(echo_calls(ch, 100, 100, "ev"), 0);
    sums_t b = totals();
    JT_CHECK_EQ(b.spins - a.spins, 0);
    JT_CHECK_EQ(b.spinning, 0);
    /* At least one event per call on each side: nothing else polls. */
    JT_CHECK(b.events - a.events >= 100);
    jet_channel_destroy(ch);
}

/* Three rounds of: `warm` calls, then 200 back-to-back calls found by
 * polling, not events; after the spin time without completions every loop
 * sleeps on events again, and the next call still gets through (the queue
 * was armed again). */
static void spin_rounds(jet_channel_t *ch, int warm)
{
    for (int round = 0; round < 3; round++) {
        JT_CHECK_EQ(echo_calls(ch, warm, 100, "warm"), 0);
        sums_t a = totals();
        JT_CHECK_EQ(echo_calls(ch, 200, 100, "spin"), 0);
        sums_t b = totals();
        /* 200 calls are 400 receives; a spell of polling takes them
         * without an event each (a loop preempted for 20 ms may start
         * another spell, hence the margin). */
        JT_CHECK(b.completions - a.completions >= 400);
        JT_CHECK(b.events - a.events < 100);
        JT_CHECK(b.spins > a.spins || b.spinning > 0);
        /* Quiet for 10x the spin time: every loop sleeps again. */
        sums_t c;
        JT_CHECK(JT_WAIT_UNTIL((c = totals(), c.spinning == 0), GUARD_US));
        JT_CHECK_EQ(echo_calls(ch, 1, 100, "after"), 0);
        sums_t d = totals();
        JT_CHECK(d.events > c.events); /* woken by an event, as in pure event mode */
    }
}

/* A long fixed spin. */
static void test_spin_then_sleep(void)
{
    jet_flag_set("urma_event_spin_us", "20000");
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    spin_rounds(ch, 2);
    jet_channel_destroy(ch);
}

/* More runnable threads than cores: a spin would hold a core the answering
 * thread needs, so the loops end their spells and sleep on events again
 * (pure event mode: events for every call, no new spell); when the load
 * goes, spinning comes back. */
static void test_spin_yields_to_load(void)
{
    jet_flag_set("urma_event_spin_us", "20000");
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(echo_calls(ch, 2, 100, "warm"), 0);
    set_runnable(sysconf(_SC_NPROCESSORS_ONLN) + 4);
    /* The verdict is the process's: three readings a millisecond apart,
     * taken by whoever asks (here this thread, so that a spell that ends
     * on its own first cannot leave it unmade); then no loop spins. */
    JT_CHECK(JT_WAIT_UNTIL(!jet__runq_has_room(jet_now_us()), GUARD_US));
    sums_t c;
    JT_CHECK(JT_WAIT_UNTIL((c = totals(), c.spinning == 0), GUARD_US));
    sums_t a = totals();
    JT_CHECK_EQ(echo_calls(ch, 100, 100, "loaded"), 0);
    sums_t b = totals();
    JT_CHECK_EQ(b.spins - a.spins, 0);
    JT_CHECK(b.events - a.events >= 100);
    set_runnable(1);
    JT_CHECK_EQ(echo_calls(ch, 2, 100, "warm"), 0);
    a = totals();
    JT_CHECK_EQ(echo_calls(ch, 200, 100, "free"), 0);
    b = totals();
    JT_CHECK(b.spins - a.spins >= 1 || b.spinning > 0);
    JT_CHECK(b.events - a.events < 100);
    jet_channel_destroy(ch);
    jet_flag_set("urma_event_spin_us", "0");
}

/* Pure event mode polls while a message is partly received (its 8 MiB come
 * in 128 pieces of 64 KiB) instead of sleeping between the pieces, and goes
 * back to sleeping once it is whole; with urma_event_partial_spin_us=0 it
 * sleeps between them, as brpc. */
static void test_partial_message_spin(void)
{
    jet_flag_set("urma_event_spin_us", "0");
    jet_flag_set("urma_event_spin_auto_us", "0");
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    JT_CHECK_EQ(echo_calls(ch, 1, 100, "warm"), 0);
    jet_flag_set("urma_event_partial_spin_us", "0");
    sums_t a = totals();
    JT_CHECK_EQ(echo_calls(ch, 3, 8 << 20, "whole"), 0);
    sums_t b = totals();
    JT_CHECK_EQ(b.spins - a.spins, 0);
    jet_flag_set("urma_event_partial_spin_us", "50");
    JT_CHECK_EQ(echo_calls(ch, 3, 8 << 20, "pieces"), 0);
    sums_t c = totals();
    fprintf(stderr, "  spells of polling for partial messages: %llu\n",
            (unsigned long long)(c.spins - b.spins));
    JT_CHECK(c.spins > b.spins);
    sums_t d;
    JT_CHECK(JT_WAIT_UNTIL((d = totals(), d.spinning == 0), 5000000));
    /* Small calls after it: events again, no spell. */
    JT_CHECK_EQ(echo_calls(ch, 20, 100, "small"), 0);
    sums_t e = totals();
    JT_CHECK_EQ(e.spins, d.spins);
    jet_channel_destroy(ch);
}

/* The estimate moves a quarter of the way to each gap, a gap counts at
 * most 4x the limit; the loop spins (for the limit) only while the
 * estimate is below the limit. */
static void test_auto_estimate(void)
{
    const int64_t max = 50;
    JT_CHECK_EQ(jet__urma_auto_spin_us(10, max), max);
    JT_CHECK_EQ(jet__urma_auto_spin_us(49, max), max);
    JT_CHECK_EQ(jet__urma_auto_spin_us(50, max), 0);
    JT_CHECK_EQ(jet__urma_auto_spin_us(10, 0), 0); /* switched off */
    JT_CHECK_EQ(jet__urma_gap_update(40, 0, max), 30);
    JT_CHECK_EQ(jet__urma_gap_update(20, 100, max), 40);
    JT_CHECK_EQ(jet__urma_gap_update(0, 1000000, max), 50); /* idle: counts as 200 */
    JT_CHECK_EQ(jet__urma_gap_update(INT64_MAX / 8, 2, max), 150);
    /* A fresh loop (no short gap seen) does not spin, nor after four close
     * batches; after a fifth it does; one idle gap stops it; sparse traffic
     * never starts it. */
    int64_t g = INT64_MAX / 8;
    JT_CHECK_EQ(jet__urma_auto_spin_us(g, max), 0);
    for (int i = 0; i < 4; i++) {
        g = jet__urma_gap_update(g, 3, max);
        JT_CHECK_EQ(jet__urma_auto_spin_us(g, max), 0);
    }
    g = jet__urma_gap_update(g, 3, max);
    JT_CHECK_EQ(jet__urma_auto_spin_us(g, max), max);
    for (int i = 0; i < 20; i++)
        g = jet__urma_gap_update(g, 2, max);
    JT_CHECK_EQ(jet__urma_auto_spin_us(g, max), max);
    g = jet__urma_gap_update(g, 5000000, max);
    JT_CHECK_EQ(jet__urma_auto_spin_us(g, max), 0);
    for (int i = 0; i < 50; i++) {
        g = jet__urma_gap_update(g, 1000, max);
        JT_CHECK_EQ(jet__urma_auto_spin_us(g, max), 0);
    }
    /* Far batches each followed by one close batch (a call's send
     * completion, then its answer) do not start it either. */
    for (int i = 0; i < 50; i++) {
        g = jet__urma_gap_update(g, i % 2 ? 1 : 1000, max);
        JT_CHECK_EQ(jet__urma_auto_spin_us(g, max), 0);
    }
    /* Gaps a little longer than the limit (traffic that a spin would just
     * miss every time) stop it. */
    for (int i = 0; i < 20; i++)
        g = jet__urma_gap_update(g, 2, max);
    for (int i = 0; i < 5; i++)
        g = jet__urma_gap_update(g, 70, max);
    JT_CHECK_EQ(jet__urma_auto_spin_us(g, max), 0);
    /* A late wake-up now and then (a preempted thread) does not stop the
     * spinning of steady traffic. */
    for (int i = 0; i < 100; i++) {
        g = jet__urma_gap_update(g, i % 10 == 9 ? 150 : 2, max);
        if (i >= 10) JT_CHECK_EQ(jet__urma_auto_spin_us(g, max), max);
    }
    /* Probes: only while the estimate is at or above the limit (below it
     * the loop spins anyway) after JET_URMA_PROBE_NEAR gaps in a row under
     * 4x the limit (never for sparse traffic, nor for far batches each
     * followed by a close one), at most every JET_URMA_PROBE_EVERY_US, and
     * never with the spin off. */
    const int64_t every = JET_URMA_PROBE_EVERY_US;
    const uint32_t near = JET_URMA_PROBE_NEAR;
    JT_CHECK(!jet__urma_probe_due(49, near, max, every));
    JT_CHECK(jet__urma_probe_due(50, near, max, every));
    JT_CHECK(jet__urma_probe_due(200, near, max, every * 10));
    JT_CHECK(!jet__urma_probe_due(100, near - 1, max, every));
    JT_CHECK(!jet__urma_probe_due(100, near, max, every - 1));
    JT_CHECK(!jet__urma_probe_due(100, near, 0, every));
    /* The estimate and the run of near gaps as a loop keeps them. */
    g = INT64_MAX / 8;
    uint32_t run = 0;
    for (int i = 0; i < 50; i++) {
        int64_t sample = i % 2 ? 1000 : 1; /* close, then far */
        g = jet__urma_gap_update(g, sample, max);
        run = sample >= 4 * max ? 0 : run + 1;
        JT_CHECK(!jet__urma_probe_due(g, run, max, every));
    }
    for (int i = 0; i < 20; i++) {
        g = jet__urma_gap_update(g, 95, max); /* both sides' wake-ups */
        run = run + 1;
        JT_CHECK_EQ(jet__urma_probe_due(g, run, max, every), i >= (int)near - 1);
    }
}

/* With urma_event_spin_us 0 and the adaptive spin on, back-to-back calls
 * are found by polling once the loops have seen them come close together
 * (a limit of 20 ms, so that a loaded machine's wake-ups count as close),
 * the loops sleep on events again when the calls stop, and calls 100 ms
 * apart (more than 4x the limit: no machine makes them closer) never start
 * a spell. */
static void test_auto_spin(void)
{
    jet_flag_set("urma_event_spin_us", "0");
    jet_flag_set("urma_event_spin_auto_us", "20000");
    jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 10000, JET_CONNECTION_SINGLE);
    JT_REQUIRE(ch);
    spin_rounds(ch, 5); /* five close batches bring the estimate down */
    /* Sparse: three calls to bring the estimates up, then none may spin. */
    for (int i = 0; i < 3; i++) {
        jt_sleep_us(100000);
        JT_CHECK_EQ(echo_calls(ch, 1, 100, "sparse"), 0);
    }
    sums_t e;
    JT_CHECK(JT_WAIT_UNTIL((e = totals(), e.spinning == 0), GUARD_US));
    for (int i = 0; i < 5; i++) {
        jt_sleep_us(100000);
        JT_CHECK_EQ(echo_calls(ch, 1, 100, "sparse"), 0);
    }
    sums_t f = totals();
    JT_CHECK_EQ(f.spins - e.spins, 0);
    JT_CHECK(f.events - e.events >= 5);
    jet_channel_destroy(ch);
    jet_flag_set("urma_event_spin_auto_us", "50");
}

/* Byte-exact echoes of every size class while spinning, and while not. */
static void test_sizes_both_ways(void)
{
    static const size_t sizes[] = {1, 511, 512, 8192, 65535, 65536, 65537, 1 << 20, 5 << 20};
    const char *spins[] = {"0", "50", "5000", "0"};
    const char *autos[] = {"0", "0", "0", "50"};
    for (size_t k = 0; k < sizeof spins / sizeof spins[0]; k++) {
        jet_flag_set("urma_event_spin_us", spins[k]);
        jet_flag_set("urma_event_spin_auto_us", autos[k]);
        ut_urma_mark_t m = ut_urma_mark();
        jet_channel_t *ch = ut_channel(g_port, JET_SOCKET_MODE_URMA, 30000, JET_CONNECTION_SINGLE);
        JT_REQUIRE(ch);
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
            JT_CHECK_EQ(echo_calls(ch, 3, sizes[i], "size"), 0);
        JT_CHECK_EQ(jt_async_batch(ch, 64, 2000, 0, GUARD_US, NULL), 0);
        /* In-process: both ends' receives and connections count. */
        ut_expect_urma(m, 2 * (3 * sizeof sizes / sizeof sizes[0] + 1), 2);
        jet_channel_destroy(ch);
    }
    jet_flag_set("urma_event_spin_us", "0");
    jet_flag_set("urma_event_spin_auto_us", "50");
}

int main(int argc, char **argv)
{
    jt_urma_main_setup(&argc, &argv, "spin");
    snprintf(g_load, sizeof g_load, "/tmp/jt-spin-load-%d", (int)getpid());
    set_runnable(1);
    jet__runq_set_source(g_load);
    jet_server_t *srv = ut_server_start(JET_SOCKET_MODE_URMA, &g_port);
    if (!srv) return 1;
    JT_RUN(test_pure_events);
    JT_RUN(test_spin_then_sleep);
    JT_RUN(test_spin_yields_to_load);
    JT_RUN(test_partial_message_spin);
    JT_RUN(test_auto_estimate);
    JT_RUN(test_auto_spin);
    JT_RUN(test_sizes_both_ways);
    jet_server_destroy(srv);
    unlink(g_load);
    return jt_finish();
}
