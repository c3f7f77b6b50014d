/* jetrpc flags: process-wide named settings.
 *
 * Every flag has a name (brpc's name where brpc has the same setting), a type,
 * a default and a help line. A flag is set, in increasing priority, by its
 * default, by the environment variable JETRPC_<NAME> (name upper-cased), and
 * by "--name=value" (or "--name value", "-name=value"; a bare "--name" sets a
 * bool to true and "--noname" to false) on the command line of a program that
 * calls jet_flags_parse(). "--help" lists every flag with its default.
 *
 * Flags are defined at file scope with JET_FLAG_DEFINE_<TYPE>(name, default,
 * help) and read as JET_FLAG(name); another file reads them after
 * JET_FLAG_DECLARE_<TYPE>(name). An integer flag defined with
 * JET_FLAG_DEFINE_INT32_RANGE / _INT64_RANGE(name, default, min, max, help)
 * accepts only values in [min, max] from the environment, the command line
 * and jet_flag_set: anything else is refused with a message naming the
 * range, and the flag keeps its value. JET_FLAG_STORE does not check, so
 * code that reads such a flag still copes with any value: in the file that
 * defines it, JET_FLAG_IN_RANGE(name) reads it as the nearest bound of its
 * range.
 *
 * A flag may be changed at any time, from any thread, by jet_flag_set or
 * JET_FLAG_STORE: JET_FLAG reads it with one atomic load (relaxed; acquire
 * for strings, whose text is then complete), so a reader sees the old or the
 * new value, never a torn one. The text of a string value stays valid for the
 * life of the process. Code that reads a flag once, at a connection's or a
 * loop's start, keeps what it read. */
#ifndef JETRPC_FLAGS_H
#define JETRPC_FLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum jet_flag_type {
    JET_FLAG_TYPE_BOOL,
    JET_FLAG_TYPE_INT32,
    JET_FLAG_TYPE_INT64,
    JET_FLAG_TYPE_DOUBLE,
    JET_FLAG_TYPE_STRING, /* value is a const char * that the registry owns once set */
} jet_flag_type_t;

typedef struct jet_flag {
    const char *name;
    jet_flag_type_t type;
    void *ptr; /* the value; flags change at run time: load it atomically (acquire for strings) */
    const char *help;
    const char *default_text;
    const char *file;
    /* INT32 and INT64 flags: the values jet_flag_set accepts (the type's
     * whole range unless defined with _RANGE; both 0 in a record written by
     * hand means the whole range too). */
    int64_t min, max;
    struct jet_flag *next; /* registry link, owned by the registry */
} jet_flag_t;

/* Adds a flag to the registry (called by the DEFINE macros before main()).
 * A second flag with the same name, or an integer flag whose min exceeds its
 * max, is refused with a message on stderr. */
void jet_flag_register(jet_flag_t *flag);

/* Applies JETRPC_* environment variables, then the command line. Recognised
 * arguments are removed from argv (argc updated); the others, and everything
 * after "--", stay. "--help" prints every flag and exits the process with 0.
 * Returns 0, or -EINVAL after printing the offending argument (unknown flag,
 * value that does not parse as the flag's type or lies outside its range;
 * argv is then left as it was, but flags set by the arguments before it
 * keep their new values), or -ENOMEM (a string flag's copy). */
int jet_flags_parse(int *argc, char ***argv);

/* Sets one flag from text. 0, -ENOENT (no such flag), -EINVAL (bad value:
 * not of the flag's type, or outside its range; the flag is unchanged) or
 * -ENOMEM (a string flag's copy). */
int jet_flag_set(const char *name, const char *value);
/* Finds a flag by name; NULL when there is none. */
const jet_flag_t *jet_flag_find(const char *name);
/* Prints "--name=value (default: d) [min, max]  help" for every flag,
 * sorted by name; the range only for flags defined with one. */
void jet_flags_print_help(FILE *out);

#ifdef __cplusplus
#define JET_FLAG_ORDER_(name) __ATOMIC_ACQUIRE
#else
#define JET_FLAG_ORDER_(name)                                                                      \
    _Generic(jet_flag__##name, const char *: __ATOMIC_ACQUIRE, default: __ATOMIC_RELAXED)
#endif
/* The flag's value (an rvalue). */
#define JET_FLAG(name)                                                                             \
    __extension__({                                                                                \
        __typeof__(jet_flag__##name) jet_flag_v_;                                                  \
        __atomic_load(&jet_flag__##name, &jet_flag_v_, JET_FLAG_ORDER_(name));                     \
        jet_flag_v_;                                                                               \
    })
/* The value of a flag defined with _RANGE in this file, a value stored past
 * its range (JET_FLAG_STORE) read as the nearest bound. */
#define JET_FLAG_IN_RANGE(name)                                                                    \
    __extension__({                                                                                \
        __typeof__(jet_flag__##name) jet_flag_r_ = JET_FLAG(name);                                 \
        jet_flag_r_<jet_flag_lo__##name ? (__typeof__(jet_flag_r_))jet_flag_lo__##name             \
                                        : jet_flag_r_>                                             \
                jet_flag_hi__##name ? (__typeof__(jet_flag_r_))jet_flag_hi__##name : jet_flag_r_;  \
    })
/* Sets the flag to value, of the flag's type (no parsing; a string must stay
 * valid for the life of the process). */
#define JET_FLAG_STORE(name, value)                                                                \
    do {                                                                                           \
        __typeof__(jet_flag__##name) jet_flag_v_ = (value);                                        \
        __atomic_store(&jet_flag__##name, &jet_flag_v_, __ATOMIC_RELEASE);                         \
    } while (0)
/* The flag's variable, for code that keeps its address; read it atomically. */
#define JET_FLAG_VAR(name) jet_flag__##name

#define JET_FLAG_DEFINE_(ctype, tag, fname, def, lo, hi, helptext)                                 \
    ctype jet_flag__##fname = def;                                                                 \
    static jet_flag_t jet_flag_rec__##fname = {.name = #fname,                                     \
                                               .type = JET_FLAG_TYPE_##tag,                        \
                                               .ptr = &jet_flag__##fname,                          \
                                               .help = helptext,                                   \
                                               .default_text = #def,                               \
                                               .file = __FILE__,                                   \
                                               .min = lo,                                          \
                                               .max = hi};                                         \
    __attribute__((constructor)) static void jet_flag_reg__##fname(void)                           \
    {                                                                                              \
        jet_flag_register(&jet_flag_rec__##fname);                                                 \
    }

#define JET_FLAG_DEFINE_BOOL(name, def, help) JET_FLAG_DEFINE_(bool, BOOL, name, def, 0, 0, help)
#define JET_FLAG_DEFINE_INT32(name, def, help)                                                     \
    JET_FLAG_DEFINE_(int32_t, INT32, name, def, INT32_MIN, INT32_MAX, help)
#define JET_FLAG_DEFINE_INT64(name, def, help)                                                     \
    JET_FLAG_DEFINE_(int64_t, INT64, name, def, INT64_MIN, INT64_MAX, help)
#define JET_FLAG_DEFINE_DOUBLE(name, def, help)                                                    \
    JET_FLAG_DEFINE_(double, DOUBLE, name, def, 0, 0, help)
#define JET_FLAG_DEFINE_STRING(name, def, help)                                                    \
    JET_FLAG_DEFINE_(const char *, STRING, name, def, 0, 0, help)
#ifdef __cplusplus
#define JET_FLAG_STATIC_ASSERT_ static_assert
#else
#define JET_FLAG_STATIC_ASSERT_ _Static_assert
#endif
/* The bounds as constants of the defining file, for JET_FLAG_IN_RANGE. */
#define JET_FLAG_RANGE_BOUNDS_(name, lo, hi)                                                       \
    __attribute__((unused)) static const int64_t jet_flag_lo__##name = (lo);                       \
    __attribute__((unused)) static const int64_t jet_flag_hi__##name = (hi);
/* The default must lie in [lo, hi] (checked at compile time). */
#define JET_FLAG_DEFINE_INT32_RANGE(name, def, lo, hi, help)                                       \
    JET_FLAG_STATIC_ASSERT_((lo) <= (def) && (def) <= (hi) && INT32_MIN <= (lo) &&                 \
                                (hi) <= INT32_MAX,                                                 \
                            "--" #name ": default outside its range");                             \
    JET_FLAG_RANGE_BOUNDS_(name, lo, hi)                                                           \
    JET_FLAG_DEFINE_(int32_t, INT32, name, def, lo, hi, help)
#define JET_FLAG_DEFINE_INT64_RANGE(name, def, lo, hi, help)                                       \
    JET_FLAG_STATIC_ASSERT_((lo) <= (def) && (def) <= (hi),                                        \
                            "--" #name ": default outside its range");                             \
    JET_FLAG_RANGE_BOUNDS_(name, lo, hi)                                                           \
    JET_FLAG_DEFINE_(int64_t, INT64, name, def, lo, hi, help)

#define JET_FLAG_DECLARE_BOOL(name)   extern bool jet_flag__##name
#define JET_FLAG_DECLARE_INT32(name)  extern int32_t jet_flag__##name
#define JET_FLAG_DECLARE_INT64(name)  extern int64_t jet_flag__##name
#define JET_FLAG_DECLARE_DOUBLE(name) extern double jet_flag__##name
#define JET_FLAG_DECLARE_STRING(name) extern const char *jet_flag__##name

#ifdef __cplusplus
}
#endif
#endif
