/* docs/en/flags.md against the code: every flag the example programs list
 * with --help (the library's flags and the examples' own) has a row in the
 * flags table whose Default column starts with the flag's default, and a
 * flag defined with a range names it, as "[min, max]", in its row. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

/* The output of a command (malloc'd, NUL-ended), or NULL. */
static char *run_capture(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    if (!p) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *s = malloc(cap);
    while (s) {
        if (n + 4096 + 1 > cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) {
                free(s);
                s = NULL;
                break;
            }
            s = t;
        }
        size_t got = fread(s + n, 1, 4096, p);
        if (got == 0) break;
        n += got;
    }
    int st = pclose(p);
    if (s) s[n] = '\0';
    if (st != 0) {
        fprintf(stderr, "  '%s' exited with status %d\n", cmd, st);
        free(s);
        return NULL;
    }
    return s;
}

/* The table row of flag name ("| `name` | ..." up to the end of the line,
 * or "| program | `name` | ..." in the examples' table), copied into row. */
static bool doc_row(const char *doc, const char *name, char *row, size_t cap)
{
    char key[4200];
    snprintf(key, sizeof key, "| `%s` |", name);
    for (const char *p = strstr(doc, key); p; p = strstr(p + 1, key)) {
        const char *bol = p;
        while (bol > doc && bol[-1] != '\n')
            bol--;
        if (*bol != '|') continue;
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - bol) : strlen(bol);
        if (len >= cap) len = cap - 1;
        memcpy(row, bol, len);
        row[len] = '\0';
        return true;
    }
    return false;
}

/* Checks one --help line: "  --name=value (default: d) [lo, hi]  help". */
static int check_line(const char *doc, const char *line, size_t len)
{
    char buf[4096];
    if (len >= sizeof buf) len = sizeof buf - 1;
    memcpy(buf, line, len);
    buf[len] = '\0';
    if (strncmp(buf, "  --", 4) != 0) return 0;
    char *name = buf + 4, *eq = strchr(name, '=');
    char *def = strstr(buf, " (default: ");
    if (!eq || !def) return 0;
    *eq = '\0';
    def += strlen(" (default: ");
    char *def_end = strstr(def, ")  ");
    char *range = NULL;
    if (!def_end) {
        def_end = strstr(def, ") [");
        if (!def_end) return 0;
        range = def_end + 2;
        char *range_end = strchr(range, ']');
        if (!range_end) return 0;
        range_end[1] = '\0';
    }
    *def_end = '\0';
    if (strncmp(name, "tf_", 3) == 0) return 0;
    static char row[16384];
    if (!doc_row(doc, name, row, sizeof row)) {
        fprintf(stderr, "  --%s has no row in docs/en/flags.md\n", name);
        return 1;
    }
    int bad = 0;
    char want[4200];
    snprintf(want, sizeof want, "| `%s` ", def);
    if (!strstr(row, want)) {
        fprintf(stderr, "  --%s: the code's default is %s; the docs say: %.200s\n", name, def, row);
        bad = 1;
    }
    if (range && !strstr(row, range)) {
        fprintf(stderr, "  --%s: the code's range %s is not in its row: %.300s\n", name, range, row);
        bad = 1;
    }
    return bad;
}

static void test_flags_doc(void)
{
    const char *src = getenv("JET_SOURCE_DIR"), *bld = getenv("JET_BUILD_DIR");
    JT_REQUIRE(src && bld);
    char path[4096];
    snprintf(path, sizeof path, "%s/docs/en/flags.md", src);
    size_t n = 0;
    char *doc = jt_read_file(path, &n);
    JT_REQUIRE(doc);
    doc = realloc(doc, n + 1);
    JT_REQUIRE(doc);
    doc[n] = '\0';
    const char *progs[] = {"example/echo/echo_server", "example/echo/echo_client"};
    int checked = 0, bad = 0, ranged = 0;
    for (size_t i = 0; i < sizeof progs / sizeof progs[0]; i++) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "'%s/%s' --help", bld, progs[i]);
        char *help = run_capture(cmd);
        JT_CHECK(help != NULL);
        for (const char *p = help; p && *p;) {
            const char *eol = strchr(p, '\n');
            size_t len = eol ? (size_t)(eol - p) : strlen(p);
            if (strncmp(p, "  --", 4) == 0) {
                checked++;
                ranged += memmem(p, len, ") [", 3) != NULL;
                bad += check_line(doc, p, len);
            }
            p += len + (eol ? 1 : 0);
        }
        free(help);
    }
    fprintf(stderr, "  %d --help lines checked (%d with a range), %d disagree with the docs\n",
            checked, ranged, bad);
    JT_CHECK(checked >= 60);
    JT_CHECK(ranged >= 30);
    JT_CHECK_EQ(bad, 0);
    free(doc);
}

int main(void)
{
    JT_RUN(test_flags_doc);
    return jt_finish();
}
