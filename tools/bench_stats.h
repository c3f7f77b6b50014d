/* Measurement helpers shared by tools/jetrpc_bench.c and
 * example/urma_performance (header only: each program includes it once).
 *
 * - bench_hist_t: an HDR-style latency histogram. Values (ns) below 2*SUB
 *   are exact; above, each power of two is cut into SUB buckets, so a bucket
 *   is at most 1/SUB (3%) of its value wide. One per caller slot (no locks),
 *   merged at the end.
 * - bench_now_ns (CLOCK_MONOTONIC) and bench_self_cpu_us (user + system time
 *   of the whole process, from getrusage). */
#ifndef JET_TOOLS_BENCH_STATS_H
#define JET_TOOLS_BENCH_STATS_H

#include <stdint.h>
#include <sys/resource.h>
#include <time.h>

#define BENCH_UNUSED __attribute__((unused))

#define HIST_SUB_BITS  5
#define HIST_SUB       (1u << HIST_SUB_BITS)
#define HIST_MAX_SHIFT 36 /* top bucket starts near 2^41 ns (~37 min) */
#define HIST_BUCKETS   ((HIST_MAX_SHIFT + 2) * HIST_SUB)

typedef struct bench_hist {
    uint64_t count;
    uint64_t sum_ns;
    uint64_t min_ns;
    uint64_t max_ns;
    uint64_t b[HIST_BUCKETS];
} bench_hist_t;

static inline unsigned hist_index(uint64_t v)
{
    if (v < 2 * HIST_SUB) return (unsigned)v;
    unsigned shift = (unsigned)(63 - __builtin_clzll(v)) - HIST_SUB_BITS;
    if (shift > HIST_MAX_SHIFT) return HIST_BUCKETS - 1;
    return (shift + 1) * HIST_SUB + (unsigned)(v >> shift) - HIST_SUB;
}

/* The middle of bucket idx. */
static inline uint64_t hist_value(unsigned idx)
{
    if (idx < 2 * HIST_SUB) return idx;
    unsigned shift = idx / HIST_SUB - 1;
    uint64_t low = (uint64_t)(HIST_SUB + idx % HIST_SUB) << shift;
    return low + ((1ull << shift) >> 1);
}

static inline void hist_add(bench_hist_t *h, uint64_t v)
{
    h->b[hist_index(v)]++;
    if (h->count == 0 || v < h->min_ns) h->min_ns = v;
    if (v > h->max_ns) h->max_ns = v;
    h->count++;
    h->sum_ns += v;
}

static BENCH_UNUSED void hist_merge(bench_hist_t *dst, const bench_hist_t *src)
{
    if (!src->count) return;
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        dst->b[i] += src->b[i];
    if (dst->count == 0 || src->min_ns < dst->min_ns) dst->min_ns = src->min_ns;
    if (src->max_ns > dst->max_ns) dst->max_ns = src->max_ns;
    dst->count += src->count;
    dst->sum_ns += src->sum_ns;
}

/* The value at quantile q (0..1], in ns; 0 for an empty histogram. */
static BENCH_UNUSED double hist_quantile(const bench_hist_t *h, double q)
{
    if (!h->count) return 0;
    uint64_t rank = (uint64_t)(q * (double)h->count + 0.999999);
    if (rank < 1) rank = 1;
    if (rank > h->count) rank = h->count;
    uint64_t seen = 0;
    for (unsigned i = 0; i < HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t v = hist_value(i);
            if (v < h->min_ns) v = h->min_ns;
            if (v > h->max_ns) v = h->max_ns;
            return (double)v;
        }
    }
    return (double)h->max_ns;
}

static inline int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static BENCH_UNUSED double bench_self_cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

#endif
