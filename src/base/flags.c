#include "jetrpc/flags.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A string value the registry allocated. The value handed to readers is s;
 * readers on other threads may hold it at any time, so it is never freed. */
typedef struct flags_str {
    struct flags_str *next;
    char s[];
} flags_str_t;

/* What the registry keeps about a flag beyond the public record. */
typedef struct flags_extra {
    const jet_flag_t *flag;
    union {
        bool b;
        int32_t i32;
        int64_t i64;
        double d;
        const char *s;
    } def;              /* value at registration, shown by --help */
    /* The bad JETRPC_ value registration printed (getenv's pointer, only
     * compared): the first jet_flags_parse that fails on it prints no
     * second line. */
    const char *env_reported;
    struct flags_extra *next;
} flags_extra_t;

/* Constructors register before main(), so everything here must work with
 * static initialisation only. The lock makes late registration (dlopen) and
 * jet_flag_set from several threads safe for the registry itself; readers of
 * a flag value take no lock: values are stored and loaded atomically. */
static pthread_mutex_t flags_lock = PTHREAD_MUTEX_INITIALIZER;
static jet_flag_t *flags_head;
static flags_extra_t *flags_extras;
/* Every string value the registry allocated, kept allocated (and reachable)
 * because a reader may still hold any of them. */
static flags_str_t *flags_strings;

#define FLAGS_ENV_PREFIX "JETRPC_"

static const char *flags_type_name(jet_flag_type_t t)
{
    switch (t) {
    case JET_FLAG_TYPE_BOOL:
        return "bool";
    case JET_FLAG_TYPE_INT32:
        return "int32";
    case JET_FLAG_TYPE_INT64:
        return "int64";
    case JET_FLAG_TYPE_DOUBLE:
        return "double";
    case JET_FLAG_TYPE_STRING:
        return "string";
    }
    return "?";
}

static jet_flag_t *flags_find_n_locked(const char *name, size_t len)
{
    for (jet_flag_t *f = flags_head; f; f = f->next)
        if (strncmp(f->name, name, len) == 0 && f->name[len] == '\0') return f;
    return NULL;
}

static flags_extra_t *flags_extra_locked(const jet_flag_t *f)
{
    for (flags_extra_t *x = flags_extras; x; x = x->next)
        if (x->flag == f) return x;
    return NULL;
}

static int flags_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes"};
    static const char *const no[] = {"false", "0", "no"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -EINVAL;
}

/* Decimal, or hex with a 0x prefix; never octal, so "010" is ten. strtoll
 * alone would accept leading blanks and stop at garbage: both are refused. */
static int flags_parse_int(const char *s, long long min, long long max, long long *out)
{
    const char *digits = s;
    if (*digits == '+' || *digits == '-') digits++;
    if (!isdigit((unsigned char)*digits)) return -EINVAL;
    int base = digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X') ? 16 : 10;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, base);
    if (end == s || *end != '\0' || errno == ERANGE || v < min || v > max) return -EINVAL;
    *out = v;
    return 0;
}

static int flags_parse_double(const char *s, double *out)
{
    if (*s == '\0' || isspace((unsigned char)*s)) return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    /* Underflow to a tiny value is harmless; overflow, inf and nan are not
     * meaningful settings. */
    if (end == s || *end != '\0' || !isfinite(v)) return -EINVAL;
    *out = v;
    return 0;
}

static int flags_set_string_locked(jet_flag_t *f, const char *value)
{
    /* Kept texts are shared by equal values: a program that flips a flag
     * between a few values keeps a few texts. */
    flags_str_t *str = flags_strings;
    while (str && strcmp(str->s, value) != 0)
        str = str->next;
    if (!str) {
        size_t len = strlen(value);
        str = malloc(sizeof *str + len + 1);
        if (!str) return -ENOMEM;
        memcpy(str->s, value, len + 1);
        str->next = flags_strings;
        flags_strings = str;
    }
    const char *v = str->s;
    __atomic_store((const char **)f->ptr, &v, __ATOMIC_RELEASE);
    return 0;
}

/* Whether the flag was defined with a range narrower than its type's. */
static bool flags_has_range(const jet_flag_t *f)
{
    if (f->type == JET_FLAG_TYPE_INT32) return f->min > INT32_MIN || f->max < INT32_MAX;
    if (f->type == JET_FLAG_TYPE_INT64) return f->min > INT64_MIN || f->max < INT64_MAX;
    return false;
}

static bool flags_in_range(const jet_flag_t *f, long long v)
{
    return !flags_has_range(f) || (v >= f->min && v <= f->max);
}

/* Why a value was refused, for the messages: "expected int32" or "expected
 * int32 in [16, 4096]". */
static void flags_expected(const jet_flag_t *f, char *buf, size_t cap)
{
    if (flags_has_range(f))
        snprintf(buf, cap, "expected %s in [%lld, %lld]", flags_type_name(f->type),
                 (long long)f->min, (long long)f->max);
    else
        snprintf(buf, cap, "expected %s", flags_type_name(f->type));
}

/* Parses fully before storing, so a bad value leaves the flag unchanged.
 * -EINVAL when the text is not of the flag's type, -ERANGE when the value is
 * outside the flag's range (the public calls report both as -EINVAL). */
static int flags_set_locked(jet_flag_t *f, const char *value)
{
    long long ll;
    int rc;
    switch (f->type) {
    case JET_FLAG_TYPE_BOOL: {
        bool b;
        if ((rc = flags_parse_bool(value, &b)) < 0) return rc;
        __atomic_store((bool *)f->ptr, &b, __ATOMIC_RELAXED);
        return 0;
    }
    case JET_FLAG_TYPE_INT32:
        if ((rc = flags_parse_int(value, INT32_MIN, INT32_MAX, &ll)) < 0) return rc;
        if (!flags_in_range(f, ll)) return -ERANGE;
        __atomic_store_n((int32_t *)f->ptr, (int32_t)ll, __ATOMIC_RELAXED);
        return 0;
    case JET_FLAG_TYPE_INT64:
        if ((rc = flags_parse_int(value, INT64_MIN, INT64_MAX, &ll)) < 0) return rc;
        if (!flags_in_range(f, ll)) return -ERANGE;
        __atomic_store_n((int64_t *)f->ptr, (int64_t)ll, __ATOMIC_RELAXED);
        return 0;
    case JET_FLAG_TYPE_DOUBLE: {
        double d;
        if ((rc = flags_parse_double(value, &d)) < 0) return rc;
        __atomic_store((double *)f->ptr, &d, __ATOMIC_RELAXED);
        return 0;
    }
    case JET_FLAG_TYPE_STRING:
        return flags_set_string_locked(f, value);
    }
    return -EINVAL;
}

/* Returns the environment value for a flag, or NULL. */
static const char *flags_env_locked(const jet_flag_t *f, char *var, size_t cap)
{
    size_t plen = sizeof FLAGS_ENV_PREFIX - 1, nlen = strlen(f->name);
    if (plen + nlen + 1 > cap) return NULL;
    memcpy(var, FLAGS_ENV_PREFIX, plen);
    for (size_t i = 0; i <= nlen; i++)
        var[plen + i] = (char)toupper((unsigned char)f->name[i]);
    return getenv(var);
}

static int flags_apply_env_locked(jet_flag_t *f, bool at_register)
{
    char var[256];
    const char *value = flags_env_locked(f, var, sizeof var);
    if (!value) return 0;
    int rc = flags_set_locked(f, value);
    flags_extra_t *x = rc < 0 ? flags_extra_locked(f) : NULL;
    bool said = !at_register && x && x->env_reported == value;
    if (x) x->env_reported = at_register ? value : NULL;
    if (rc < 0 && !said) {
        char why[96];
        flags_expected(f, why, sizeof why);
        fprintf(stderr, "jetrpc: bad value '%s' in %s for flag --%s (%s): %s\n", value, var,
                f->name, why, strerror(-rc));
    }
    return rc < 0 ? -EINVAL : 0;
}

void jet_flag_register(jet_flag_t *flag)
{
    if (!flag || !flag->name || !flag->name[0] || !flag->ptr) {
        fprintf(stderr, "jetrpc: refusing to register a flag without a name or storage\n");
        return;
    }
    if (flag->type == JET_FLAG_TYPE_INT32 || flag->type == JET_FLAG_TYPE_INT64) {
        bool i32 = flag->type == JET_FLAG_TYPE_INT32;
        if (flag->min == 0 && flag->max == 0) { /* a record written without a range */
            flag->min = i32 ? INT32_MIN : INT64_MIN;
            flag->max = i32 ? INT32_MAX : INT64_MAX;
        }
        if (flag->min > flag->max) {
            fprintf(stderr, "jetrpc: flag --%s has an empty range [%lld, %lld]; not registered\n",
                    flag->name, (long long)flag->min, (long long)flag->max);
            return;
        }
    }
    pthread_mutex_lock(&flags_lock);
    jet_flag_t *old = flags_find_n_locked(flag->name, strlen(flag->name));
    if (old) {
        fprintf(stderr, "jetrpc: flag --%s defined twice (%s and %s); the second is ignored\n",
                flag->name, old->file ? old->file : "?", flag->file ? flag->file : "?");
        pthread_mutex_unlock(&flags_lock);
        return;
    }
    /* Without the side record the flag still works; help falls back to the
     * default's source text. */
    flags_extra_t *x = calloc(1, sizeof *x);
    if (x) {
        x->flag = flag;
        switch (flag->type) {
        case JET_FLAG_TYPE_BOOL:
            x->def.b = *(bool *)flag->ptr;
            break;
        case JET_FLAG_TYPE_INT32:
            x->def.i32 = *(int32_t *)flag->ptr;
            break;
        case JET_FLAG_TYPE_INT64:
            x->def.i64 = *(int64_t *)flag->ptr;
            break;
        case JET_FLAG_TYPE_DOUBLE:
            x->def.d = *(double *)flag->ptr;
            break;
        case JET_FLAG_TYPE_STRING:
            x->def.s = *(const char **)flag->ptr;
            break;
        }
        x->next = flags_extras;
        flags_extras = x;
    }
    flag->next = flags_head;
    flags_head = flag;
    /* The environment applies from the start, so that programs (and tests)
     * that never call jet_flags_parse() still honour JETRPC_<NAME>. */
    flags_apply_env_locked(flag, true);
    pthread_mutex_unlock(&flags_lock);
}

const jet_flag_t *jet_flag_find(const char *name)
{
    if (!name) return NULL;
    pthread_mutex_lock(&flags_lock);
    const jet_flag_t *f = flags_find_n_locked(name, strlen(name));
    pthread_mutex_unlock(&flags_lock);
    return f;
}

int jet_flag_set(const char *name, const char *value)
{
    if (!name || !value) return -EINVAL;
    pthread_mutex_lock(&flags_lock);
    jet_flag_t *f = flags_find_n_locked(name, strlen(name));
    int rc = f ? flags_set_locked(f, value) : -ENOENT;
    pthread_mutex_unlock(&flags_lock);
    return rc == -ERANGE ? -EINVAL : rc;
}

/* Shortest text that reads back as the same double. */
static void flags_format_double(double d, char *buf, size_t cap)
{
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, d);
        if (strtod(buf, NULL) == d) return;
    }
}

static void flags_print_value(FILE *out, jet_flag_type_t type, const void *v)
{
    char buf[64];
    switch (type) {
    case JET_FLAG_TYPE_BOOL:
        fputs(__atomic_load_n((const bool *)v, __ATOMIC_RELAXED) ? "true" : "false", out);
        break;
    case JET_FLAG_TYPE_INT32:
        fprintf(out, "%d", (int)__atomic_load_n((const int32_t *)v, __ATOMIC_RELAXED));
        break;
    case JET_FLAG_TYPE_INT64:
        fprintf(out, "%lld", (long long)__atomic_load_n((const int64_t *)v, __ATOMIC_RELAXED));
        break;
    case JET_FLAG_TYPE_DOUBLE: {
        double d;
        __atomic_load((const double *)v, &d, __ATOMIC_RELAXED);
        flags_format_double(d, buf, sizeof buf);
        fputs(buf, out);
        break;
    }
    case JET_FLAG_TYPE_STRING: {
        const char *s = __atomic_load_n((const char *const *)v, __ATOMIC_ACQUIRE);
        fprintf(out, "\"%s\"", s ? s : "");
        break;
    }
    }
}

static void flags_print_one_locked(FILE *out, const jet_flag_t *f)
{
    fprintf(out, "  --%s=", f->name);
    flags_print_value(out, f->type, f->ptr);
    fputs(" (default: ", out);
    const flags_extra_t *x = flags_extra_locked(f);
    if (x)
        flags_print_value(out, f->type, &x->def);
    else
        fputs(f->default_text ? f->default_text : "?", out);
    fputc(')', out);
    if (flags_has_range(f)) fprintf(out, " [%lld, %lld]", (long long)f->min, (long long)f->max);
    fprintf(out, "  %s\n", f->help ? f->help : "");
}

static int flags_cmp_name(const void *a, const void *b)
{
    const jet_flag_t *fa = *(const jet_flag_t *const *)a, *fb = *(const jet_flag_t *const *)b;
    return strcmp(fa->name, fb->name);
}

void jet_flags_print_help(FILE *out)
{
    if (!out) return;
    pthread_mutex_lock(&flags_lock);
    size_t n = 0;
    for (const jet_flag_t *f = flags_head; f; f = f->next)
        n++;
    fprintf(out, "Flags (--name=value on the command line, or JETRPC_NAME=value in the "
                 "environment):\n");
    const jet_flag_t **v = malloc((n ? n : 1) * sizeof *v);
    if (v) {
        size_t i = 0;
        for (const jet_flag_t *f = flags_head; f; f = f->next)
            v[i++] = f;
        qsort(v, n, sizeof *v, flags_cmp_name);
        for (i = 0; i < n; i++)
            flags_print_one_locked(out, v[i]);
        free(v);
    } else {
        for (const jet_flag_t *f = flags_head; f; f = f->next)
            flags_print_one_locked(out, f);
    }
    pthread_mutex_unlock(&flags_lock);
    fflush(out);
}

/* Handles argv[*i] if it is a flag. Returns 1 when consumed (and advances
 * *i past a separate value), 0 when the argument is not ours, 2 for --help,
 * or a negative code after printing why. */
static int flags_parse_arg_locked(int argc, char **argv, int *i)
{
    const char *arg = argv[*i];
    const char *body = arg + 1;
    bool dashdash = *body == '-';
    if (dashdash) body++;
    const char *eq = strchr(body, '=');
    size_t len = eq ? (size_t)(eq - body) : strlen(body);
    const char *value = eq ? eq + 1 : NULL;

    jet_flag_t *f = len ? flags_find_n_locked(body, len) : NULL;
    bool negated = false;
    if (!f && len > 2 && body[0] == 'n' && body[1] == 'o') {
        jet_flag_t *g = flags_find_n_locked(body + 2, len - 2);
        if (g && g->type == JET_FLAG_TYPE_BOOL) {
            f = g;
            negated = true;
        }
    }
    if (!f) {
        if (len == 4 && strncmp(body, "help", 4) == 0 && !value) return 2;
        /* "-x" may be the program's own option; "--x" is always meant for us. */
        if (!dashdash) return 0;
        fprintf(stderr, "jetrpc: unknown flag '%s' (--help lists the flags)\n", arg);
        return -EINVAL;
    }
    if (negated) {
        if (value) {
            fprintf(stderr, "jetrpc: '%s': --no%s takes no value\n", arg, f->name);
            return -EINVAL;
        }
        value = "false";
    } else if (!value) {
        if (f->type == JET_FLAG_TYPE_BOOL) {
            value = "true";
        } else if (*i + 1 < argc) {
            value = argv[++*i];
        } else {
            fprintf(stderr, "jetrpc: flag '%s' needs a value (%s)\n", arg,
                    flags_type_name(f->type));
            return -EINVAL;
        }
    }
    int rc = flags_set_locked(f, value);
    if (rc < 0) {
        char why[96];
        flags_expected(f, why, sizeof why);
        fprintf(stderr, "jetrpc: bad value '%s' for flag --%s (%s): %s\n", value, f->name, why,
                strerror(-rc));
        return -EINVAL;
    }
    return 1;
}

int jet_flags_parse(int *argc, char ***argv)
{
    if (!argc || !argv || *argc < 0 || (*argc > 0 && !*argv)) return -EINVAL;
    int n = *argc;
    char **av = *argv;
    /* Which arguments to drop; argv is only rewritten once everything
     * parsed, so a failure leaves it as it was. */
    bool *drop = calloc((size_t)n + 1, sizeof *drop);
    if (!drop) return -ENOMEM;

    int rc = 0;
    bool help = false;
    pthread_mutex_lock(&flags_lock);
    for (jet_flag_t *f = flags_head; f; f = f->next) {
        rc = flags_apply_env_locked(f, false);
        if (rc < 0) goto out_unlock;
    }
    for (int i = 1; i < n; i++) {
        const char *arg = av[i];
        if (!arg || arg[0] != '-' || arg[1] == '\0') continue;
        if (strcmp(arg, "--") == 0) break;
        int first = i;
        rc = flags_parse_arg_locked(n, av, &i);
        if (rc < 0) goto out_unlock;
        if (rc == 2) help = true;
        if (rc > 0)
            for (int k = first; k <= i; k++)
                drop[k] = true;
        rc = 0;
    }
out_unlock:
    pthread_mutex_unlock(&flags_lock);
    if (rc == 0 && help) {
        /* After the loop, so that the listing shows the values this command
         * line sets. */
        jet_flags_print_help(stdout);
        free(drop);
        exit(0);
    }
    if (rc == 0) {
        int w = 0;
        for (int i = 0; i < n; i++)
            if (!drop[i]) av[w++] = av[i];
        if (w < n) av[w] = NULL;
        *argc = w;
    }
    free(drop);
    return rc;
}
