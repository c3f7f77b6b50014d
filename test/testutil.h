/* Minimal test harness shared by every test executable.
 *
 * A test file defines static void functions and calls JT_RUN(fn) for each
 * from main(), then returns jt_finish(). A failed check prints file:line and
 * the expression, marks the current case failed and continues with the next
 * statement (checks that guard later dereferences use JT_REQUIRE, which
 * returns from the case). */
#ifndef JET_TESTUTIL_H
#define JET_TESTUTIL_H

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

/* Reads a whole file; *len_p gets its size. Returns malloc'd bytes or NULL. */
void *jt_read_file(const char *path, size_t *len_p);
/* Path of a file under the shared folder (JET_SHARED_DIR), in a static buffer. */
const char *jt_shared_path(const char *rel);

/* Guard-page buffers: len bytes placed so that the byte after the last one is
 * on a PROT_NONE page. Free with jt_guard_free. */
void *jt_guard_alloc(const void *src, size_t len);
void jt_guard_free(void *p, size_t len);

/* Monotonic microseconds. */
uint64_t jt_now_us(void);

/* Forks a child that runs fn(arg) and exits with its return value. */
pid_t jt_fork(int (*fn)(void *arg), void *arg);
/* Waits for a child; returns its exit status, or 128+signal. */
int jt_wait(pid_t pid);

#endif
