/* Minimal test harness shared by every test executable.
 *
 * A test file defines static void functions and calls JT_RUN(fn) for each
 * from main(), then returns jt_finish(). A failed check prints file:line and
 * the expression, marks the current case failed and continues with the next
 * statement (checks that guard later dereferences use JT_REQUIRE, which
 * returns from the case). */
#ifndef JET_TESTUTIL_H
#define JET_TESTUTIL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

extern int jt_case_failed;

void jt_fail(const char *file, int line, const char *expr);
void jt_run(const char *name, void (*fn)(void));
int jt_finish(void);

#define JT_RUN(fn) jt_run(#fn, fn)
#define JT_CHECK(c)                                                                                \
    do {                                                                                           \
        if (!(c)) jt_fail(__FILE__, __LINE__, #c);                                                 \
    } while (0)
#define JT_REQUIRE(c)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            jt_fail(__FILE__, __LINE__, #c);                                                       \
            return;                                                                                \
        }                                                                                          \
    } while (0)
#define JT_CHECK_EQ(a, b)                                                                          \
    do {                                                                                           \
        long long jt_a_ = (long long)(a), jt_b_ = (long long)(b);                                  \
        if (jt_a_ != jt_b_) {                                                                      \
            char jt_m_[256];                                                                       \
            snprintf(jt_m_, sizeof jt_m_, "%s == %s (%lld != %lld)", #a, #b, jt_a_, jt_b_);        \
            jt_fail(__FILE__, __LINE__, jt_m_);                                                    \
        }                                                                                          \
    } while (0)
/* JT_CHECK that names what it was checking (a case label, a file) before the
 * failure line: for checks repeated over many inputs. */
#define JT_CHECK_AT(label, c)                                                                      \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "  [%s]", label);                                                      \
            jt_fail(__FILE__, __LINE__, #c);                                                       \
        }                                                                                          \
    } while (0)

/* Reads a whole file; *len_p gets its size. Returns malloc'd bytes or NULL. */
void *jt_read_file(const char *path, size_t *len_p);

/* What the process writes to fd 2 (every thread's log lines) between
 * jt_stderr_begin and jt_stderr_end goes to a temporary file instead;
 * jt_stderr_end restores fd 2 and returns the text (malloc'd, NUL-ended;
 * NULL if the capture could not start). Check results after the end:
 * a failing check's line would be captured too. */
typedef struct jt_stderr_cap {
    FILE *file;
    int saved_fd;
} jt_stderr_cap_t;
void jt_stderr_begin(jt_stderr_cap_t *c);
char *jt_stderr_end(jt_stderr_cap_t *c);
/* Lines of s that contain part. */
int jt_count_lines_with(const char *s, const char *part);
/* Path of a file under the shared folder (JET_SHARED_DIR), in a static buffer. */
const char *jt_shared_path(const char *rel);

/* Guard-page buffers: len bytes placed so that the byte after the last one is
 * on a PROT_NONE page. Free with jt_guard_free. */
void *jt_guard_alloc(const void *src, size_t len);
void jt_guard_free(void *p, size_t len);

/* Monotonic microseconds. */
uint64_t jt_now_us(void);
/* Monotonic milliseconds, and what is left of a deadline in them (0 once past). */
int64_t jt_now_ms(void);
int jt_left_ms(int64_t deadline_ms);
void jt_sleep_us(int64_t us);

/* Polls cond every poll_us until it holds or guard_us passes; evaluates to
 * the last value of cond. A guard, never a timing assertion. */
#define JT_WAIT_EVERY(cond, guard_us, poll_us)                                                     \
    ({                                                                                             \
        uint64_t jt_end_ = jt_now_us() + (uint64_t)(guard_us);                                     \
        bool jt_ok_;                                                                               \
        while (!(jt_ok_ = (cond)) && jt_now_us() < jt_end_)                                        \
            jt_sleep_us(poll_us);                                                                  \
        jt_ok_;                                                                                    \
    })
#define JT_WAIT_UNTIL(cond, guard_us) JT_WAIT_EVERY(cond, guard_us, 500)
/* Waits until *v >= target (polled every 100 us) or guard_us passes. */
bool jt_wait_at_least(_Atomic int *v, int target, int64_t guard_us);

/* Big-endian 32-bit fields, byte by byte. */
void jt_put_be32(uint8_t *p, uint32_t v);
uint32_t jt_get_be32(const uint8_t *p);

/* One xorshift64 (13, 7, 17) step of *state; returns the new state. */
uint64_t jt_xorshift64(uint64_t *state);

/* Byte k of an endless test stream: a mixed 64-bit counter, so that a lost,
 * repeated or moved piece of any size shows. */
uint8_t jt_stream_byte(uint64_t k);
/* p[0..len) = stream bytes from offset off. */
void jt_stream_fill(uint8_t *p, uint64_t off, size_t len);
/* Offset of the first byte of p[0..len) that differs from the stream at off, or -1. */
int64_t jt_stream_check(const uint8_t *p, uint64_t off, size_t len);
/* Deterministic bytes (xorshift32), different for every seed and offset. */
void jt_fill_pattern(uint8_t *p, size_t n, uint32_t seed);

/* Forks a child that runs fn(arg) and exits with its return value. */
pid_t jt_fork(int (*fn)(void *arg), void *arg);
/* Waits for a child; returns its exit status, or 128+signal. */
int jt_wait(pid_t pid);

#endif
