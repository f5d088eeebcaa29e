/* zerosim — the configuration's internals (private to src/config/): the
 * DeepSpeed loader's state and table types, shared by deepspeed.c (the
 * loader), deepspeed_keys.c (the key schema) and finalize.c. */
#ifndef ZEROSIM_CONFIG_IMPL_H
#define ZEROSIM_CONFIG_IMPL_H

#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>

#include "zerosim/config.h"

#define XSTR_(x) #x
#define XSTR(x) XSTR_(x)

/* The largest power of two a float holds: bounds initial_scale_power. */
#define MAX_SCALE_POWER 127

/* At most this many problems are listed (the count says if there were more). */
#define LOADER_MAX_PROBLEMS 24
#define LOADER_PROBLEM_LEN 400

/* The loader's state: the configuration being built and what sections said
 * that only makes sense once the whole file is read. */
typedef struct {
    const char *name;        /* file name for messages */
    zs_run_config c;         /* the configuration being built */
    int fp16_enabled;        /* fp16.enabled was true */
    int bf16_enabled;        /* bf16.enabled was true */
    int opt_is_adamw;        /* optimizer.type named AdamW (not Adam) */
    double warmup_min_lr;    /* WarmupLR / WarmupDecayLR's warmup_min_lr */
    float lr_before_sched;   /* the optimizer's lr, for warmup_max_lr "auto" */
    int nproblems;           /* problems found so far */
    char problems[LOADER_MAX_PROBLEMS][LOADER_PROBLEM_LEN];
} loader;

/* Allowed values of a number. */
typedef struct {
    double lo, hi;           /* bounds */
    int lo_open, hi_open;    /* 1: the bound itself is excluded */
    int integral;            /* 1: whole numbers only (5e8 is whole) */
    const char *expect;      /* what messages ask for */
} num_rule;

/* Integers go through long long; 9.2e18 < 2^63 keeps the cast defined. */
#define INTEGRAL_MAX 9.2e18

typedef enum {
    FK_INT,      /* int member */
    FK_SIZE,     /* size_t member */
    FK_U64,      /* uint64_t member */
    FK_FLOAT,    /* float member */
    FK_COUNT,    /* int member read with R_COUNT, clamped to INT_MAX */
    FK_NOEFFECT, /* accepted with no effect in zerosim (of type `type`) */
    FK_UNMODELLED, /* a DeepSpeed feature zerosim does not model: only its
                      "off" value (`off`) is accepted */
    FK_SECTION,  /* an object described by another table */
    FK_FUNC      /* anything else: a handler */
} field_kind;

/* The JSON type a no-effect key must have. */
typedef enum { JT_ANY, JT_BOOL, JT_NUMBER, JT_STRING, JT_OBJECT } json_kind;

/* What counts as "off" for an unmodelled feature. */
typedef enum {
    OFF_FALSE,     /* false */
    OFF_AT_MOST_1, /* a number <= 1 (a group size of 1, a factor of 1) */
    OFF_TRUE,      /* true (the feature is the false value) */
    OFF_NEG,       /* a number < 0 (DeepSpeed's "not set": mics_shard_size -1) */
    OFF_DEVICE,    /* null, or an object whose "device" is "none" or absent */
    OFF_DISABLED,  /* an object in which no "enabled" is true (at any depth) */
    OFF_NULL,      /* null */
    OFF_NEVER      /* any value is the feature */
} off_kind;

typedef int (*field_fn)(loader *ld, const char *path, const json_t *v);

typedef struct field_table field_table;

typedef struct {
    const char *key;
    field_kind kind;
    size_t off;              /* FK_INT..FK_FLOAT, FK_COUNT: offset in zs_run_config */
    const num_rule *rule;    /* FK_INT..FK_FLOAT: allowed values */
    const field_table *sub;  /* FK_SECTION */
    field_fn fn;             /* FK_FUNC */
    json_kind type;          /* FK_NOEFFECT */
    off_kind offv;           /* FK_UNMODELLED */
    const char *what;        /* FK_UNMODELLED: the feature, in a few words */
    const char *instead;     /* FK_UNMODELLED: what to do instead */
    unsigned autobit;        /* "auto" allowed: the ZS_AUTO_* bit, else 0 */
} field;

struct field_table {
    const field *f;
    size_t n;
};

#define TABLE(a) { a, sizeof a / sizeof a[0] }
/* Offset of member m, which must have type T (a compile error otherwise). */
#define OFF(m, T) _Generic(((zs_run_config *)0)->m, T: offsetof(zs_run_config, m))
#define F_INT(k, m, r) { .key = k, .kind = FK_INT, .off = OFF(m, int), .rule = &r }
#define F_COUNT(k, m) { .key = k, .kind = FK_COUNT, .off = OFF(m, int), .rule = &R_COUNT }
#define F_SIZE(k, m) { .key = k, .kind = FK_SIZE, .off = OFF(m, size_t), .rule = &R_BIG_INT }
#define F_U64(k, m) { .key = k, .kind = FK_U64, .off = OFF(m, uint64_t), .rule = &R_BIG_INT }
#define F_FLOAT(k, m, r) { .key = k, .kind = FK_FLOAT, .off = OFF(m, float), .rule = &r }
#define F_SECTION(k, t) { .key = k, .kind = FK_SECTION, .sub = &t }
#define F_FUNC(k, f) { .key = k, .kind = FK_FUNC, .fn = f }
/* a key with no effect in zerosim, of JSON type t */
#define F_NONE(k, t) { .key = k, .kind = FK_NOEFFECT, .type = t }
/* a DeepSpeed feature zerosim does not model: o is its "off" value */
#define F_UNMOD(k, o, w, i) { .key = k, .kind = FK_UNMODELLED, .offv = o, .what = w, .instead = i }
/* the same fields with "auto" allowed (bit b of zs_run_config.auto_mask) */
#define A_INT(k, m, r, b) { .key = k, .kind = FK_INT, .off = OFF(m, int), .rule = &r, .autobit = b }
#define A_FLOAT(k, m, r, b) { .key = k, .kind = FK_FLOAT, .off = OFF(m, float), .rule = &r, .autobit = b }
#define A_SIZE(k, m, b) { .key = k, .kind = FK_SIZE, .off = OFF(m, size_t), .rule = &R_BIG_INT, .autobit = b }
#define A_FUNC(k, f, b) { .key = k, .kind = FK_FUNC, .fn = f, .autobit = b }

#pragma GCC visibility push(hidden)

/* deepspeed.c: messages */
int zs_config_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int zs_ds_equal_nocase(const char *a, const char *b);
void zs_ds_describe(const json_t *v, char *buf, size_t n);

/* deepspeed.c: reading values and objects */
void zs_ds_join(char *buf, size_t n, const char *path, const char *key);
int zs_ds_bad_value(const loader *ld, const char *path, const json_t *v, const char *expect);
int zs_ds_read_number(const loader *ld, const char *path, const json_t *v, const num_rule *r,
                      double *d, long long *ll);
int zs_ds_read_bool(const loader *ld, const char *path, const json_t *v, int *out);
int zs_ds_read_string(const loader *ld, const char *path, const json_t *v, const char *expect,
                      const char **out);
void zs_ds_note_noeffect(loader *ld, const char *path);
int zs_ds_check_keys(loader *ld, const char *path, const json_t *obj, const field_table *t,
                     const char *note);
int zs_ds_apply_object(loader *ld, const char *path, const json_t *obj, const field_table *t,
                       const char *note);
int zs_ds_skip(loader *ld, const char *path, const json_t *v);

/* deepspeed_keys.c: the top-level table, and the allowed values that more
 * than one file's tables use */
extern const field_table zs_ds_top_table;
extern const num_rule R_POS_INT, R_BIG_INT, R_ANY_INT, R_POS, R_NONNEG, R_FRACTION, R_BETA,
    R_NONNEG_INT, R_COUNT;

/* A section that `zerosim config-keys` lists under its path. */
typedef struct {
    const char *path;
    const field_table *t;
} zs_ds_section;

/* deepspeed_optim.c: the "optimizer" and "scheduler" sections, and their
 * params' tables as config-keys lists them (n of them) */
int zs_ds_load_optimizer(loader *ld, const char *path, const json_t *v);
int zs_ds_load_scheduler(loader *ld, const char *path, const json_t *v);
const zs_ds_section *zs_ds_optim_sections(size_t *n);

#pragma GCC visibility pop

#endif
