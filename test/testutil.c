#include "testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int jt_case_failed;
static int jt_passed, jt_failed;

void jt_fail(const char *file, int line, const char *expr)
{
    fprintf(stderr, "  FAIL %s:%d: %s\n", file, line, expr);
    jt_case_failed = 1;
}

void jt_run(const char *name, void (*fn)(void))
{
    /* JT_ONLY=<part of a name>: run just the matching cases (debugging). */
    const char *only = getenv("JT_ONLY");
    if (only && *only && !strstr(name, only)) return;
    jt_case_failed = 0;
    fprintf(stderr, "[ RUN  ] %s\n", name);
    uint64_t t0 = jt_now_us();
    fn();
    uint64_t t1 = jt_now_us();
    if (jt_case_failed)
        jt_failed++;
    else
        jt_passed++;
    fprintf(stderr, "[ %s ] %s (%.1f ms)\n", jt_case_failed ? "FAIL" : " OK ", name,
            (double)(t1 - t0) / 1000.0);
}

int jt_finish(void)
{
    printf("%d passed, %d failed\n", jt_passed, jt_failed);
    return jt_failed ? 1 : 0;
}

void *jt_read_file(const char *path, size_t *len_p)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) *len_p = (size_t)n;
    return p;
}

void jt_stderr_begin(jt_stderr_cap_t *c)
{
    fflush(stderr);
    c->file = tmpfile();
    c->saved_fd = c->file ? dup(2) : -1;
    if (c->saved_fd >= 0) dup2(fileno(c->file), 2);
}

char *jt_stderr_end(jt_stderr_cap_t *c)
{
    fflush(stderr);
    if (c->saved_fd >= 0) {
        dup2(c->saved_fd, 2);
        close(c->saved_fd);
        c->saved_fd = -1;
    }
    if (!c->file) return NULL;
    off_t len = lseek(fileno(c->file), 0, SEEK_END);
    if (len < 0) len = 0;
    char *s = calloc(1, (size_t)len + 1);
    if (s && len > 0 && pread(fileno(c->file), s, (size_t)len, 0) != len) s[0] = '\0';
    fclose(c->file);
    c->file = NULL;
    return s;
}

int jt_count_lines_with(const char *s, const char *part)
{
    int n = 0;
    while (s && *s) {
        const char *eol = strchr(s, '\n');
        size_t len = eol ? (size_t)(eol - s) : strlen(s);
        const char *hit = strstr(s, part);
        if (hit && hit < s + len) n++;
        s += len + (eol ? 1 : 0);
    }
    return n;
}

const char *jt_shared_path(const char *rel)
{
    static char buf[4096];
    const char *dir = getenv("JET_SHARED_DIR");
    snprintf(buf, sizeof buf, "%s/%s", dir && *dir ? dir : "../shared", rel);
    return buf;
}

void *jt_guard_alloc(const void *src, size_t len)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t data_pages = (len + pg - 1) / pg;
    size_t total = (data_pages + 1) * pg;
    char *base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) abort();
    mprotect(base + data_pages * pg, pg, PROT_NONE);
    char *p = base + data_pages * pg - len;
    if (len) memcpy(p, src, len);
    return p;
}

void jt_guard_free(void *p, size_t len)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t data_pages = (len + pg - 1) / pg;
    char *end = (char *)p + len;
    char *base = end - data_pages * pg;
    munmap(base, (data_pages + 1) * pg);
}

uint64_t jt_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

pid_t jt_fork(int (*fn)(void *arg), void *arg)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) _exit(fn(arg));
    return pid;
}

int jt_wait(pid_t pid)
{
    int st = 0;
    if (waitpid(pid, &st, 0) < 0) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

int64_t jt_now_ms(void)
{
    return (int64_t)(jt_now_us() / 1000);
}

int jt_left_ms(int64_t deadline_ms)
{
    int64_t l = deadline_ms - jt_now_ms();
    return l < 0 ? 0 : (int)l;
}

void jt_sleep_us(int64_t us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

bool jt_wait_at_least(_Atomic int *v, int target, int64_t guard_us)
{
    uint64_t end = jt_now_us() + (uint64_t)guard_us;
    while (atomic_load(v) < target) {
        if (jt_now_us() > end) return false;
        jt_sleep_us(100);
    }
    return true;
}

void jt_put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

uint32_t jt_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

uint64_t jt_xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

uint8_t jt_stream_byte(uint64_t k)
{
    uint64_t v = (k >> 3) * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    return (uint8_t)(v >> (8 * (k & 7)));
}

void jt_stream_fill(uint8_t *p, uint64_t off, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = jt_stream_byte(off + i);
}

int64_t jt_stream_check(const uint8_t *p, uint64_t off, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != jt_stream_byte(off + i)) return (int64_t)(off + i);
    return -1;
}

void jt_fill_pattern(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)(x >> 7);
    }
}
