/* zerosim — run configuration: defaults, the DeepSpeed-style JSON loader and
 * the batch arithmetic.
 *
 * The loader is table-driven. Each JSON object the file may contain is
 * described by a table of fields: the key, how its value is stored (an int,
 * size_t, uint64_t or float member of zs_run_config, an accepted flag with no
 * effect, a sub-object, or a handler function), where, and the allowed range.
 * Loading an object first rejects every key that is not in its table, then
 * applies the fields in table order, so precedence never depends on the order
 * of the keys in the file: the optimizer is applied before the scheduler,
 * whose warmup_max_lr overrides the optimizer's lr as it does in DeepSpeed.
 *
 * Keys a section omits keep their current value (defaults, or what an earlier
 * layer set), with one exception: a section that names an optimizer or a
 * scheduler type starts from DeepSpeed's defaults for that type, because the
 * parameters of a type only mean something together. A DeepSpeed file then
 * means the same in zerosim as in DeepSpeed: an "AdamW" section without
 * "betas" gets (0.9, 0.999), a "WarmupLR" section without "warmup_type" warms
 * up logarithmically over 1000 steps.
 *
 * zerosim knows DeepSpeed's whole key schema (deepspeed/runtime/config.py,
 * zero/config.py, offload_config.py and the documented sections). Every key
 * of a table is one of:
 *   - used: it changes what zerosim does;
 *   - no effect (FK_NOEFFECT): logging, profiling, tuning and the like, which
 *     mean nothing in a simulator; accepted, and listed once at start-up and
 *     in the report (zs_run_config.noeffect);
 *   - unmodelled (FK_UNMODELLED): a real DeepSpeed feature zerosim does not
 *     model yet. Its "off" value (false, "none", enabled: false, ...) is
 *     accepted as no effect; any other value is a problem that names the
 *     feature and what to use instead.
 * Keys DeepSpeed does not know are problems, with a "did you mean" when a
 * known key is close. "auto" (the Hugging Face Trainer's placeholder) is
 * accepted where the Trainer fills it in, and resolved from zerosim's own
 * options and the model (zs_run_config.auto_mask; zs_run_config_describe_auto).
 *
 * Every problem of a file is collected, not only the first: a field that
 * fails is recorded and loading goes on with the next, and the error lists
 * them all, one per line.
 *
 * Loading works on a copy and commits it only on success, so a failed load
 * leaves the caller's configuration untouched.
 */
#include "zerosim/config.h"
#include "zerosim/error.h"
#include "zerosim/quant.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XSTR_(x) #x
#define XSTR(x) XSTR_(x)

/* Micro-batch size used when neither train_batch_size nor
 * train_micro_batch_size_per_gpu is given. */
#define DEFAULT_MICRO_BATCH 8

/* The largest power of two a float holds: bounds initial_scale_power. */
#define MAX_SCALE_POWER 127

void zs_run_config_defaults(zs_run_config *c)
{
    memset(c, 0, sizeof *c);

    c->model.kind = ZS_MODEL_GPT;
    c->model.n_layer = 2;
    c->model.n_embd = 64;
    c->model.n_head = 4;
    c->model.seq_len = 32;
    c->model.vocab = 64;
    c->model.input_dim = 32;
    c->model.n_classes = 8;
    c->model.n_hidden = 2;
    for (int i = 0; i < ZS_MLP_MAX_HIDDEN; i++)
        c->model.widths[i] = 64;
    c->model.act = ZS_ACT_RELU;

    c->steps = 100;
    c->compression = (zs_comp_spec){.kind = ZS_COMP_NONE, .topk_fraction = 0.01};
    c->error_feedback = 1;
    c->compression_warmup = 0;
    c->train_batch_size = 0;
    c->micro_batch = 0;
    c->grad_accum = 0;
    c->seed = 1234;
    c->steps_per_print = 10;

    c->precision = ZS_DTYPE_F32;
    c->tp = c->pp = 1;
    c->pp_schedule = ZS_PP_1F1B;
    c->virtual_stages = 1;
    c->ep = 1;
    /* mixture of experts, off (moe_experts 0); DeepSpeed's MoE layer's
     * defaults: top-1, capacity factor 1, min_capacity 4; the aux loss
     * coefficient of DeepSpeed's examples (0.01); every block */
    c->model.moe_every = 1;
    c->model.moe_top_k = 1;
    c->model.moe_capacity_factor = 1.0;
    c->model.moe_min_capacity = 4;
    c->model.moe_aux_coeff = 0.01;

    c->optimizer = ZS_OPT_ADAMW;
    c->lr = 3e-3f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.0f;
    c->momentum = 0.9f;

    c->scheduler = ZS_SCHED_WARMUP_COSINE;
    c->warmup_steps = 10;
    c->total_steps = 0;
    c->warmup_min_ratio = 0.0f;
    c->cos_min_ratio = 0.1f;
    c->warmup_linear = 1;

    c->grad_clip = 1.0f;

    c->static_loss_scale = 0.0f;
    c->initial_scale_power = 16;
    c->loss_scale_window = 1000;
    c->hysteresis = 2;
    c->min_loss_scale = 1.0f;

    c->stage = 0;
    c->reduce_bucket_size = 500000000;
    c->allgather_bucket_size = 500000000;
    c->stage3_max_live_parameters = 1000000000;
    c->stage3_prefetch_bucket_size = 50000000;
    c->grad_reduce = ZS_GRAD_REDUCE_MICRO;
    c->overlap_comm = -1;
    c->grad_scaling = ZS_GRAD_IN_LOSS;
    c->grad_predivide = 1.0;
    c->comm_dtype = c->grad_accum_dtype = -1;
    c->collective_timeout = 600.0;
}

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */

/* Record a message, replacing control characters (from keys, strings or file
 * names in the input) so that it stays one line. */
static int vfail(const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return zs_error_set("%s", msg);
}

/* printf-style front end of vfail. */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(fmt, ap);
    va_end(ap);
    return rc;
}

/* ASCII case-insensitive string equality (strcasecmp is POSIX, not C11). */
static int equal_nocase(const char *a, const char *b)
{
    for (; *a && *b; a++, b++) {
        int ca = (*a >= 'A' && *a <= 'Z') ? *a - 'A' + 'a' : *a;
        int cb = (*b >= 'A' && *b <= 'Z') ? *b - 'A' + 'a' : *b;
        if (ca != cb)
            return 0;
    }
    return *a == *b;
}

/* Levenshtein distance between two short strings; a large number when
 * either is too long to be worth comparing. */
static int edit_distance(const char *a, const char *b)
{
    enum { MAXLEN = 64 };
    size_t la = strlen(a), lb = strlen(b);
    if (la > MAXLEN || lb > MAXLEN)
        return INT_MAX;
    int row[MAXLEN + 1];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* What a JSON value is, for "got ..." in messages: the value itself for
 * numbers, the type's name otherwise. */
static void describe(const json_t *v, char *buf, size_t n)
{
    switch (json_typeof(v)) {
    case JSON_INTEGER: snprintf(buf, n, "%" JSON_INTEGER_FORMAT, json_integer_value(v)); break;
    case JSON_REAL: snprintf(buf, n, "%.9g", json_real_value(v)); break;
    case JSON_STRING: snprintf(buf, n, "string"); break;
    case JSON_OBJECT: snprintf(buf, n, "object"); break;
    case JSON_ARRAY: snprintf(buf, n, "array"); break;
    case JSON_TRUE:
    case JSON_FALSE: snprintf(buf, n, "boolean"); break;
    default: snprintf(buf, n, "null"); break;
    }
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                    */

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

static const num_rule R_POS_INT = {1, INT_MAX, 0, 0, 1, "a positive integer"};
static const num_rule R_BIG_INT = {0, INTEGRAL_MAX, 0, 0, 1, "a non-negative integer"};
static const num_rule R_SCALE_POWER = {0, MAX_SCALE_POWER, 0, 0, 1,
                                       "an integer from 0 to " XSTR(MAX_SCALE_POWER)};
static const num_rule R_MLP_LAYERS = {0, ZS_MLP_MAX_HIDDEN, 0, 0, 1,
                                      "an integer from 0 to " XSTR(ZS_MLP_MAX_HIDDEN)};
static const num_rule R_STAGE = {0, 3, 0, 0, 1, "0, 1, 2 or 3"};
static const num_rule R_ANY_INT = {-INTEGRAL_MAX, INTEGRAL_MAX, 0, 0, 1, "an integer"};
static const num_rule R_POS = {0, FLT_MAX, 1, 0, 0, "a number > 0"};
static const num_rule R_NONNEG = {0, FLT_MAX, 0, 0, 0, "a number >= 0"};
static const num_rule R_FRACTION = {0, 1, 0, 0, 0, "a number from 0 to 1"};
static const num_rule R_BETA = {0, 1, 0, 1, 0, "a number >= 0 and < 1"};
static const num_rule R_NONNEG_INT = {0, INT_MAX, 0, 0, 1, "a non-negative integer"};
/* A count that may be as large as DeepSpeed takes (a Python int); values
 * above INT_MAX mean "never" in practice and are stored as INT_MAX. */
static const num_rule R_COUNT = {1, INTEGRAL_MAX, 0, 0, 1, "a positive integer"};

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

/* ------------------------------------------------------------------------ */
/* Reading values                                                            */

/* The full key path of key inside path ("" at the top level). */
static void join(char *buf, size_t n, const char *path, const char *key)
{
    if (path[0])
        snprintf(buf, n, "%s.%s", path, key);
    else
        snprintf(buf, n, "%s", key);
}

/* The message for a value of the wrong type or out of range. */
static int bad_value(const loader *ld, const char *path, const json_t *v, const char *expect)
{
    char got[64];
    describe(v, got, sizeof got);
    const char *hint = "";
    if (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0)
        hint = " (\"auto\" is filled in by the Hugging Face Trainer, not DeepSpeed: write the value)";
    return fail("%s: \"%s\" must be %s, got %s%s", ld->name, path, expect, got, hint);
}

/* Read a number allowed by r: its value as a double and, for integral rules,
 * as a long long. */
static int read_number(const loader *ld, const char *path, const json_t *v, const num_rule *r,
                       double *d, long long *ll)
{
    if (!json_is_number(v))
        return bad_value(ld, path, v, r->expect);
    double x = json_number_value(v);
    int ok = (r->lo_open ? x > r->lo : x >= r->lo) && (r->hi_open ? x < r->hi : x <= r->hi);
    if (ok && r->integral) {
        if (json_is_integer(v))
            *ll = json_integer_value(v);
        else if (x == floor(x))
            *ll = (long long)x;
        else
            ok = 0;
    }
    if (!ok)
        return bad_value(ld, path, v, r->expect);
    *d = x;
    return 0;
}

/* Read true or false into *out. */
static int read_bool(const loader *ld, const char *path, const json_t *v, int *out)
{
    if (!json_is_boolean(v))
        return bad_value(ld, path, v, "true or false");
    *out = json_is_true(v);
    return 0;
}

/* Read a string into *out. */
static int read_string(const loader *ld, const char *path, const json_t *v, const char *expect,
                       const char **out)
{
    if (!json_is_string(v))
        return bad_value(ld, path, v, expect);
    *out = json_string_value(v);
    return 0;
}

/* Reject a key that t does not list, suggesting the nearest one it does. */
static int unknown_key(const loader *ld, const char *path, const char *key, const field_table *t,
                       const char *note)
{
    const char *best = NULL;
    int best_d = INT_MAX;
    for (size_t i = 0; i < t->n; i++) {
        int d = edit_distance(key, t->f[i].key);
        if (d < best_d) {
            best_d = d;
            best = t->f[i].key;
        }
    }
    const char *dot = path[0] ? "." : "";
    if (best && best_d <= 2 && (size_t)best_d * 2 < strlen(best))
        return fail("%s: unknown key \"%s%s%.100s\"%s; check the spelling: did you mean \"%s%s%s\"?",
                    ld->name, path, dot, key, note, path, dot, best);
    return fail("%s: unknown key \"%s%s%.100s\"%s; check the spelling, or remove it if it is a "
                "DeepSpeed setting zerosim does not implement",
                ld->name, path, dot, key, note);
}

static int apply_object(loader *ld, const char *path, const json_t *obj, const field_table *t,
                        const char *note);

/* The failure of a function whose problems are already recorded: an empty
 * message tells callers not to record it again. */
static int recorded(void)
{
    zs_error_clear();
    return -1;
}

/* Record the current error message as one of the file's problems. */
static void note_problem(loader *ld)
{
    if (ld->nproblems < LOADER_MAX_PROBLEMS)
        snprintf(ld->problems[ld->nproblems], LOADER_PROBLEM_LEN, "%s", zs_error_msg());
    ld->nproblems++;
}

/* Add path to the keys accepted with no effect (comma-separated; a full list
 * ends in ", ..."). */
static void note_noeffect(loader *ld, const char *path)
{
    char *l = ld->c.noeffect;
    size_t n = strlen(l), cap = sizeof ld->c.noeffect;
    if (n >= 4 && strcmp(l + n - 3, "...") == 0)
        return;
    size_t need = strlen(path) + (n ? 2 : 0);
    if (n + need + 6 >= cap) {
        snprintf(l + n, cap - n, "%s...", n ? ", " : "");
        return;
    }
    snprintf(l + n, cap - n, "%s%s", n ? ", " : "", path);
}

/* Whether v has the JSON type k. */
static int check_type(const loader *ld, const char *path, const json_t *v, json_kind k)
{
    static const char *const names[] = {"any value", "true or false", "a number", "a string",
                                        "an object"};
    int ok = k == JT_ANY || (k == JT_BOOL && json_is_boolean(v)) ||
             (k == JT_NUMBER && json_is_number(v)) || (k == JT_STRING && json_is_string(v)) ||
             (k == JT_OBJECT && json_is_object(v));
    /* DeepSpeed's optional sections and strings may be null */
    if (json_is_null(v) && k != JT_BOOL && k != JT_NUMBER)
        ok = 1;
    return ok ? 0 : bad_value(ld, path, v, names[k]);
}

/* Whether an object (at any depth) has "enabled": true. */
static int any_enabled(const json_t *v)
{
    const char *key;
    json_t *x;
    size_t i;
    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, x) {
            if (strcmp(key, "enabled") == 0 && json_is_true(x))
                return 1;
            if (any_enabled(x))
                return 1;
        }
    } else if (json_is_array(v)) {
        json_array_foreach(v, i, x)
            if (any_enabled(x))
                return 1;
    }
    return 0;
}

/* Whether v is the "off" value of an unmodelled feature. */
static int is_off(const json_t *v, off_kind k)
{
    switch (k) {
    case OFF_FALSE: return json_is_false(v);
    case OFF_TRUE: return json_is_true(v);
    case OFF_AT_MOST_1: return json_is_number(v) && json_number_value(v) <= 1;
    case OFF_NEG: return json_is_number(v) && json_number_value(v) < 0;
    case OFF_DEVICE: {
        if (json_is_null(v))
            return 1;
        const json_t *d = json_is_object(v) ? json_object_get(v, "device") : NULL;
        return json_is_object(v) && (!d || json_is_null(d) ||
                                     (json_is_string(d) && !strcmp(json_string_value(d), "none")));
    }
    case OFF_DISABLED: return (json_is_object(v) && !any_enabled(v)) || json_is_null(v);
    case OFF_NULL: return json_is_null(v);
    case OFF_NEVER: return 0;
    }
    return 0;
}

/* "auto" for a field that allows it: keep zerosim's value (its default, or
 * what the command line sets later; finalize resolves the rest) and record
 * the bit. */
static int apply_auto(loader *ld, const char *path, const field *f)
{
    static zs_run_config defaults;
    static int have_defaults;
    if (!have_defaults) {
        zs_run_config_defaults(&defaults);
        have_defaults = 1;
    }
    zs_run_config *c = &ld->c;
    ld->c.auto_mask |= f->autobit;
    switch (f->autobit) {
    case ZS_AUTO_TRAIN_BATCH: c->train_batch_size = 0; break;
    case ZS_AUTO_MICRO_BATCH: c->micro_batch = 0; break;
    case ZS_AUTO_GRAD_ACCUM: c->grad_accum = 0; break;
    case ZS_AUTO_GRAD_CLIP: c->grad_clip = defaults.grad_clip; break;
    case ZS_AUTO_LR: c->lr = defaults.lr; break;
    case ZS_AUTO_BETAS: c->beta1 = defaults.beta1; c->beta2 = defaults.beta2; break;
    case ZS_AUTO_EPS: c->eps = defaults.eps; break;
    case ZS_AUTO_WEIGHT_DECAY: c->weight_decay = defaults.weight_decay; break;
    case ZS_AUTO_WARMUP_MIN_LR: ld->warmup_min_lr = 0.0; break;
    case ZS_AUTO_WARMUP_MAX_LR: c->lr = ld->lr_before_sched; break;
    case ZS_AUTO_WARMUP_STEPS: c->warmup_steps = defaults.warmup_steps; break;
    case ZS_AUTO_TOTAL_STEPS: c->total_steps = 0; break;
    case ZS_AUTO_FP16: case ZS_AUTO_BF16: break; /* --precision decides */
    default: break; /* bucket sizes: finalize, from the hidden size */
    }
    (void)path;
    return 0;
}

/* Apply one field's value. */
static int apply_field(loader *ld, const char *path, const field *f, const json_t *v)
{
    char *base = (char *)&ld->c;
    double d = 0;
    long long ll = 0;

    switch (f->kind) {
    case FK_INT:
        ZS_TRY(read_number(ld, path, v, f->rule, &d, &ll));
        *(int *)(base + f->off) = (int)ll;
        return 0;
    case FK_SIZE:
        ZS_TRY(read_number(ld, path, v, f->rule, &d, &ll));
        *(size_t *)(base + f->off) = (size_t)ll;
        return 0;
    case FK_U64:
        ZS_TRY(read_number(ld, path, v, f->rule, &d, &ll));
        *(uint64_t *)(base + f->off) = (uint64_t)ll;
        return 0;
    case FK_FLOAT:
        ZS_TRY(read_number(ld, path, v, f->rule, &d, &ll));
        *(float *)(base + f->off) = (float)d;
        return 0;
    case FK_COUNT:
        ZS_TRY(read_number(ld, path, v, f->rule, &d, &ll));
        *(int *)(base + f->off) = ll > INT_MAX ? INT_MAX : (int)ll;
        return 0;
    case FK_NOEFFECT:
        ZS_TRY(check_type(ld, path, v, f->type));
        note_noeffect(ld, path);
        return 0;
    case FK_UNMODELLED:
        if (!is_off(v, f->offv))
            return fail("%s: \"%s\" is a DeepSpeed feature zerosim does not model yet (%s): %s",
                        ld->name, path, f->what, f->instead);
        note_noeffect(ld, path);
        return 0;
    case FK_SECTION:
        return apply_object(ld, path, v, f->sub, "");
    case FK_FUNC:
        return f->fn(ld, path, v);
    }
    return fail("%s: internal error: bad field kind for \"%s\"", ld->name, path);
}

/* Reject keys of obj that t does not list. */
static int check_keys(loader *ld, const char *path, const json_t *obj, const field_table *t,
                      const char *note)
{
    const char *key;
    json_t *v;
    int rc = 0;
    json_object_foreach((json_t *)obj, key, v) {
        size_t i = 0;
        while (i < t->n && strcmp(t->f[i].key, key) != 0)
            i++;
        if (i < t->n)
            continue;
        if (key[0] == '_' || strstr(key, "comment")) { /* "_comment", "comment": notes */
            char sub[128];
            join(sub, sizeof sub, path, key);
            note_noeffect(ld, sub);
            continue;
        }
        unknown_key(ld, path, key, t, note);
        note_problem(ld);
        rc = 1;
    }
    return rc ? recorded() : 0;
}

/* Apply the JSON object obj, found at path, as described by t: reject keys t
 * does not list, then apply the present fields in table order. note is added
 * to unknown-key messages (for example, which type the keys belong to). */
static int apply_object(loader *ld, const char *path, const json_t *obj, const field_table *t,
                        const char *note)
{
    if (!json_is_object(obj))
        return bad_value(ld, path, obj, "an object");
    int rc = check_keys(ld, path, obj, t, note);
    for (size_t i = 0; i < t->n; i++) {
        const json_t *v = json_object_get(obj, t->f[i].key);
        if (!v)
            continue;
        char sub[128];
        join(sub, sizeof sub, path, t->f[i].key);
        int is_auto = json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
        int frc;
        if (is_auto && t->f[i].autobit)
            frc = apply_auto(ld, sub, &t->f[i]);
        else if (is_auto && t->f[i].kind == FK_NOEFFECT)
            frc = (note_noeffect(ld, sub), 0);
        else
            frc = apply_field(ld, sub, &t->f[i], v);
        if (frc) {
            /* an empty message: the problems were recorded where found */
            if (zs_error_msg()[0] != '\0')
                note_problem(ld);
            rc = 1;
        }
    }
    return rc ? recorded() : 0;
}

/* A field handled elsewhere (a "type" read before its object is applied). */
static int skip(loader *ld, const char *path, const json_t *v)
{
    (void)ld;
    (void)path;
    (void)v;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* optimizer                                                                 */

/* optimizer.params.betas: [beta1, beta2], each in [0, 1). */
static int opt_betas(loader *ld, const char *path, const json_t *v)
{
    if (!json_is_array(v) || json_array_size(v) != 2)
        return bad_value(ld, path, v, "an array of two numbers [beta1, beta2]");
    float *dst[2] = {&ld->c.beta1, &ld->c.beta2};
    for (size_t i = 0; i < 2; i++) {
        char sub[128];
        double d;
        long long ll;
        snprintf(sub, sizeof sub, "%s[%zu]", path, i);
        ZS_TRY(read_number(ld, sub, json_array_get(v, i), &R_BETA, &d, &ll));
        *dst[i] = (float)d;
    }
    return 0;
}

/* optimizer.params.torch_adam: true selects torch.optim.AdamW in DeepSpeed,
 * whose weight_decay defaults to 0.01 (FusedAdam's to 0). The update is the
 * same, so only that default changes. */
static int opt_torch_adam(loader *ld, const char *path, const json_t *v)
{
    int on = 1;
    ZS_TRY(read_bool(ld, path, v, &on));
    if (on)
        ld->c.weight_decay = 0.01f;
    return 0;
}

/* optimizer.params.adam_w_mode: DeepSpeed's "Adam" with adam_w_mode false is
 * Adam with L2 regularization (weight_decay * w added to the gradient);
 * "AdamW" is always decoupled (DeepSpeed forces adam_w_mode on for it). */
static int opt_adam_w_mode(loader *ld, const char *path, const json_t *v)
{
    int on = 1;
    ZS_TRY(read_bool(ld, path, v, &on));
    ld->c.adam_l2 = !on && !ld->opt_is_adamw;
    return 0;
}

/* optimizer.params.bias_correction: false leaves m and v uncorrected. */
static int opt_bias_correction(loader *ld, const char *path, const json_t *v)
{
    int on = 1;
    ZS_TRY(read_bool(ld, path, v, &on));
    ld->c.adam_no_bias_correction = !on;
    return 0;
}

static const field adam_params[] = {
    A_FLOAT("lr", lr, R_POS, ZS_AUTO_LR),
    A_FUNC("betas", opt_betas, ZS_AUTO_BETAS),
    A_FLOAT("eps", eps, R_POS, ZS_AUTO_EPS),
    F_FUNC("torch_adam", opt_torch_adam),
    A_FLOAT("weight_decay", weight_decay, R_NONNEG, ZS_AUTO_WEIGHT_DECAY),
    F_FUNC("adam_w_mode", opt_adam_w_mode),
    F_FUNC("bias_correction", opt_bias_correction),
    F_UNMOD("amsgrad", OFF_FALSE, "AMSGrad's running maximum of v", "set it to false"),
    F_NONE("fused", JT_BOOL),
    F_NONE("foreach", JT_BOOL),
    F_NONE("capturable", JT_BOOL),
    F_NONE("set_grad_none", JT_BOOL),
};
static const field sgd_params[] = {
    A_FLOAT("lr", lr, R_POS, ZS_AUTO_LR),
    F_FLOAT("momentum", momentum, R_NONNEG),
    A_FLOAT("weight_decay", weight_decay, R_NONNEG, ZS_AUTO_WEIGHT_DECAY),
    F_UNMOD("dampening", OFF_AT_MOST_1, "SGD's momentum dampening", "remove it (0)"),
    F_UNMOD("nesterov", OFF_FALSE, "Nesterov momentum", "set it to false"),
    F_NONE("foreach", JT_BOOL),
    F_NONE("maximize", JT_BOOL),
};
static const field_table adam_table = TABLE(adam_params);
static const field_table sgd_table = TABLE(sgd_params);

/* The keys of the optimizer and scheduler sections themselves. */
static const field typed_section[] = {F_FUNC("type", skip), F_FUNC("params", skip)};
static const field_table typed_table = TABLE(typed_section);

/* Read the "type" string a typed section requires. */
static int section_type(const loader *ld, const char *path, const json_t *obj, const char *choices,
                        const char **type)
{
    char sub[128];
    join(sub, sizeof sub, path, "type");
    const json_t *v = json_object_get(obj, "type");
    if (!v)
        return fail("%s: \"%s\" is required: one of %s", ld->name, sub, choices);
    return read_string(ld, sub, v, choices, type);
}

/* DeepSpeed's optimizers (deepspeed/runtime/config.py) that zerosim does not
 * model, and why. */
static const struct {
    const char *name;
    const char *why;
} unmodelled_optimizers[] = {
    {"OneBitAdam", "1-bit Adam compresses Adam's momentum after its freeze_step warm-up; zerosim's "
                   "nearest is Adam with \"gradient_compression\": {\"method\": \"sign\"} and "
                   "its warmup_steps, which compresses gradients"},
    {"ZeroOneAdam", "0/1 Adam freezes the variance and compresses the momentum; use Adam, "
                    "optionally with gradient_compression"},
    {"OneBitLamb", "1-bit LAMB compresses LAMB's momentum; use Adam, optionally with "
                   "gradient_compression"},
    {"Lamb", "LAMB's layer-wise trust ratio is not modelled; use Adam or AdamW"},
    {"Adagrad", "use Adam or AdamW"},
    {"Lion", "use Adam or AdamW"},
    {"MuAdam", "muP's width-scaled learning rates are not modelled; use Adam"},
    {"MuAdamW", "muP's width-scaled learning rates are not modelled; use AdamW"},
    {"MuSGD", "muP's width-scaled learning rates are not modelled; use SGD"},
    {"Adam8bit", "8-bit optimizer states are not modelled; use Adam"},
    {"AdamW8bit", "8-bit optimizer states are not modelled; use AdamW"},
};

/* optimizer: {type, params}. Adam and AdamW (DeepSpeed's Adam is AdamW by
 * default) start from FusedAdam's defaults, SGD from torch.optim.SGD's.
 * DeepSpeed matches the type case-insensitively. */
static int load_optimizer(loader *ld, const char *path, const json_t *v)
{
    static const char choices[] = "\"Adam\", \"AdamW\" or \"SGD\"";
    const char *type = NULL;
    if (!json_is_object(v))
        return bad_value(ld, path, v, "an object");
    ZS_TRY(check_keys(ld, path, v, &typed_table, ""));
    ZS_TRY(section_type(ld, path, v, choices, &type));

    zs_run_config *c = &ld->c;
    const field_table *params;
    for (size_t k = 0; k < sizeof unmodelled_optimizers / sizeof unmodelled_optimizers[0]; k++)
        if (equal_nocase(type, unmodelled_optimizers[k].name))
            return fail("%s: \"%s.type\": %s is a DeepSpeed optimizer zerosim does not model yet: "
                        "%s",
                        ld->name, path, unmodelled_optimizers[k].name, unmodelled_optimizers[k].why);
    c->adam_l2 = 0;
    c->adam_no_bias_correction = 0;
    if (equal_nocase(type, "adam") || equal_nocase(type, "adamw")) {
        ld->opt_is_adamw = equal_nocase(type, "adamw");
        c->optimizer = ZS_OPT_ADAMW;
        c->lr = 1e-3f;
        c->beta1 = 0.9f;
        c->beta2 = 0.999f;
        c->eps = 1e-8f;
        c->weight_decay = 0.0f;
        params = &adam_table;
    } else if (equal_nocase(type, "sgd")) {
        c->optimizer = ZS_OPT_SGD;
        c->lr = 1e-3f;
        c->momentum = 0.0f;
        c->weight_decay = 0.0f;
        params = &sgd_table;
    } else {
        return fail("%s: \"%s.type\" must be %s, got \"%.64s\"", ld->name, path, choices, type);
    }

    const json_t *p = json_object_get(v, "params");
    if (!p)
        return 0;
    char sub[128], note[96];
    join(sub, sizeof sub, path, "params");
    snprintf(note, sizeof note, " for optimizer type \"%.32s\"", type);
    return apply_object(ld, sub, p, params, note);
}

/* ------------------------------------------------------------------------ */
/* scheduler                                                                 */

/* scheduler.params.warmup_type: "linear" or "log". */
static int sched_warmup_type(loader *ld, const char *path, const json_t *v)
{
    const char *s = NULL;
    ZS_TRY(read_string(ld, path, v, "\"linear\" or \"log\"", &s));
    if (strcmp(s, "linear") == 0)
        ld->c.warmup_linear = 1;
    else if (strcmp(s, "log") == 0)
        ld->c.warmup_linear = 0;
    else
        return fail("%s: \"%s\" must be \"linear\" or \"log\", got \"%.64s\"", ld->name, path, s);
    return 0;
}

/* scheduler.params.warmup_min_lr: kept until the maximum is known. */
static int sched_min_lr(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    return read_number(ld, path, v, &R_NONNEG, &ld->warmup_min_lr, &ll);
}

/* scheduler.params.warmup_max_lr: the learning rate after warm-up. */
static int sched_max_lr(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    ZS_TRY(read_number(ld, path, v, &R_POS, &d, &ll));
    ld->c.lr = (float)d;
    return 0;
}

/* scheduler.params.last_batch_iteration: only -1 (start from the beginning). */
static int sched_last_iter(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    ZS_TRY(read_number(ld, path, v, &R_ANY_INT, &d, &ll));
    if (ll != -1)
        return fail("%s: \"%s\" must be -1: zerosim always starts the schedule from the "
                    "beginning, got %lld",
                    ld->name, path, ll);
    return 0;
}

/* warmup_num_steps and total_num_steps: counts as large as DeepSpeed takes */
#define F_WARMUP_STEPS \
    { .key = "warmup_num_steps", .kind = FK_COUNT, .off = OFF(warmup_steps, int), \
      .rule = &R_COUNT, .autobit = ZS_AUTO_WARMUP_STEPS }
#define F_TOTAL_STEPS \
    { .key = "total_num_steps", .kind = FK_COUNT, .off = OFF(total_steps, int), \
      .rule = &R_COUNT, .autobit = ZS_AUTO_TOTAL_STEPS }

static const field warmup_params[] = {
    A_FUNC("warmup_min_lr", sched_min_lr, ZS_AUTO_WARMUP_MIN_LR),
    A_FUNC("warmup_max_lr", sched_max_lr, ZS_AUTO_WARMUP_MAX_LR),
    F_WARMUP_STEPS,
    F_FUNC("warmup_type", sched_warmup_type),
    F_FUNC("last_batch_iteration", sched_last_iter),
};
static const field warmup_decay_params[] = {
    F_TOTAL_STEPS,
    A_FUNC("warmup_min_lr", sched_min_lr, ZS_AUTO_WARMUP_MIN_LR),
    A_FUNC("warmup_max_lr", sched_max_lr, ZS_AUTO_WARMUP_MAX_LR),
    F_WARMUP_STEPS,
    F_FUNC("warmup_type", sched_warmup_type),
    F_FUNC("last_batch_iteration", sched_last_iter),
};
static const field warmup_cosine_params[] = {
    F_TOTAL_STEPS,
    F_FLOAT("warmup_min_ratio", warmup_min_ratio, R_FRACTION),
    F_WARMUP_STEPS,
    F_FLOAT("cos_min_ratio", cos_min_ratio, R_FRACTION),
    F_FUNC("warmup_type", sched_warmup_type),
    F_FUNC("last_batch_iteration", sched_last_iter),
};

/* DeepSpeed's schedulers and the defaults of their parameters
 * (deepspeed/runtime/lr_schedules.py). */
static const struct {
    const char *name;
    zs_sched_kind kind;
    field_table params;
    float max_lr;            /* warmup_max_lr default; 0 = the optimizer's lr */
    float cos_min_ratio;     /* final fraction of lr */
    int uses_min_lr;         /* warmup_min_lr / warmup_max_lr give warmup_min_ratio */
} schedulers[] = {
    {"WarmupLR", ZS_SCHED_WARMUP, TABLE(warmup_params), 0.0f, 1.0f, 1},
    {"WarmupDecayLR", ZS_SCHED_WARMUP_DECAY, TABLE(warmup_decay_params), 1e-3f, 0.0f, 1},
    {"WarmupCosineLR", ZS_SCHED_WARMUP_COSINE, TABLE(warmup_cosine_params), 0.0f, 1e-4f, 0},
};

/* scheduler: {type, params}. The type's DeepSpeed defaults: warm up for 1000
 * steps from 0, logarithmically; total_num_steps (required by DeepSpeed for
 * the decaying ones) defaults to the run's steps. */
static int load_scheduler(loader *ld, const char *path, const json_t *v)
{
    static const char choices[] = "\"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"";
    const char *type = NULL;
    if (!json_is_object(v))
        return bad_value(ld, path, v, "an object");
    ZS_TRY(check_keys(ld, path, v, &typed_table, ""));
    ZS_TRY(section_type(ld, path, v, choices, &type));

    size_t k = 0, n = sizeof schedulers / sizeof schedulers[0];
    while (k < n && strcmp(schedulers[k].name, type) != 0)
        k++;
    if (k == n && (!strcmp(type, "OneCycle") || !strcmp(type, "LRRangeTest")))
        return fail("%s: \"%s.type\": %s is a DeepSpeed scheduler zerosim does not model yet: "
                    "use WarmupLR, WarmupDecayLR or WarmupCosineLR",
                    ld->name, path, type);
    if (k == n)
        return fail("%s: \"%s.type\" must be %s (the names are case-sensitive), got \"%.64s\"",
                    ld->name, path, choices, type);

    zs_run_config *c = &ld->c;
    ld->lr_before_sched = c->lr;
    c->scheduler = schedulers[k].kind;
    c->warmup_steps = 1000;
    c->warmup_linear = 0;
    c->total_steps = 0;
    c->warmup_min_ratio = 0.0f;
    c->cos_min_ratio = schedulers[k].cos_min_ratio;
    if (schedulers[k].max_lr > 0)
        c->lr = schedulers[k].max_lr;
    ld->warmup_min_lr = 0.0;

    const json_t *p = json_object_get(v, "params");
    if (p) {
        char sub[128], note[96];
        join(sub, sizeof sub, path, "params");
        snprintf(note, sizeof note, " for scheduler type \"%s\"", type);
        ZS_TRY(apply_object(ld, sub, p, &schedulers[k].params, note));
    }
    if (schedulers[k].uses_min_lr) {
        if (ld->warmup_min_lr > c->lr)
            return fail("%s: \"%s.params.warmup_min_lr\" (%g) must not exceed the learning rate "
                        "after warm-up (%g)",
                        ld->name, path, ld->warmup_min_lr, (double)c->lr);
        c->warmup_min_ratio = c->lr > 0 ? (float)(ld->warmup_min_lr / c->lr) : 0.0f;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* fp16, bf16, zero_optimization, zerosim                                    */

/* fp16.enabled */
static int fp16_enabled(loader *ld, const char *path, const json_t *v)
{
    return read_bool(ld, path, v, &ld->fp16_enabled);
}

/* bf16.enabled */
static int bf16_enabled(loader *ld, const char *path, const json_t *v)
{
    return read_bool(ld, path, v, &ld->bf16_enabled);
}

/* fp16.auto_cast: zerosim does not cast model inputs, so only false. */
static int fp16_auto_cast(loader *ld, const char *path, const json_t *v)
{
    int on = 1;
    ZS_TRY(read_bool(ld, path, v, &on));
    if (on)
        return fail("%s: \"%s\" is a DeepSpeed feature zerosim does not model yet (casting the "
                    "model's inputs to fp16): set it to false or remove it",
                    ld->name, path);
    return 0;
}

/* zero_optimization.overlap_comm: true or false. */
static int zero_overlap_comm(loader *ld, const char *path, const json_t *v)
{
    int on = 0;
    ZS_TRY(read_bool(ld, path, v, &on));
    ld->c.overlap_comm = on != 0;
    return 0;
}

int zs_step_overlap(const zs_run_config *cfg)
{
    return cfg->overlap_comm < 0 ? cfg->stage == 3 : cfg->overlap_comm != 0;
}

/* zero_optimization.stage, with the message users look for. */
static int zero_stage(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    if (!json_is_number(v) || read_number(ld, path, v, &R_STAGE, &d, &ll)) {
        char got[64];
        describe(v, got, sizeof got);
        return fail("%s: %s must be 0, 1, 2 or 3, got %s", ld->name, path, got);
    }
    ld->c.stage = (int)ll;
    return 0;
}

const char *zs_offload_name(zs_offload o)
{
    return o == ZS_OFFLOAD_CPU ? "cpu" : o == ZS_OFFLOAD_NVME ? "nvme" : "none";
}

int zs_offload_parse(const char *s, zs_offload *out)
{
    if (!strcmp(s, "none"))
        *out = ZS_OFFLOAD_NONE;
    else if (!strcmp(s, "cpu"))
        *out = ZS_OFFLOAD_CPU;
    else if (!strcmp(s, "nvme"))
        *out = ZS_OFFLOAD_NVME;
    else
        return -1;
    return 0;
}

/* zero_optimization.offload_optimizer / offload_param: null, or an object
 * (DeepSpeed's DeepSpeedZeroOffloadOptimizerConfig and ..ParamConfig). */
/* The keys of an offload section that tune the transfers, not what moves. */
static const char *const offload_noeffect_keys[] = {
    "pin_memory", "buffer_count", "buffer_size", "max_in_cpu", "fast_init", "pipeline_read",
    "pipeline_write", "pipeline",
};
static int offload_noeffect(const char *key)
{
    for (size_t i = 0; i < sizeof offload_noeffect_keys / sizeof offload_noeffect_keys[0]; i++)
        if (!strcmp(key, offload_noeffect_keys[i]))
            return 1;
    return 0;
}

static int zero_offload(loader *ld, const char *path, const json_t *v)
{
    int param = strstr(path, "offload_param") != NULL;
    zs_offload *dst = param ? &ld->c.offload_param : &ld->c.offload_optimizer;
    if (json_is_null(v)) {
        *dst = ZS_OFFLOAD_NONE;
        return 0;
    }
    if (!json_is_object(v))
        return fail("%s: %s must be an object such as {\"device\": \"cpu\"}, or null",
                    ld->name, path);

    const char *key;
    json_t *x;
    char sub[512];
    json_object_foreach((json_t *)v, key, x) {
        snprintf(sub, sizeof sub, "%s.%s", path, key);
        if (!strcmp(key, "device")) {
            if (json_is_null(x)) {
                *dst = ZS_OFFLOAD_NONE;
            } else if (!json_is_string(x) || zs_offload_parse(json_string_value(x), dst)) {
                return fail("%s: %s must be \"none\", \"cpu\" or \"nvme\"", ld->name, sub);
            }
        } else if (!strcmp(key, "nvme_path")) {
            if (json_is_null(x))
                continue;
            if (!json_is_string(x) || strlen(json_string_value(x)) >= sizeof ld->c.nvme_path)
                return fail("%s: %s must be a path (a string)", ld->name, sub);
            snprintf(ld->c.nvme_path, sizeof ld->c.nvme_path, "%s", json_string_value(x));
        } else if (!strcmp(key, "ratio")) {
            if (!json_is_number(x) || json_number_value(x) != 1.0)
                return fail("%s: %s below 1 (partial offload, ZeRO-Offload++'s Twin-Flow) is a "
                            "DeepSpeed feature zerosim does not model yet: remove it or set it "
                            "to 1", ld->name, sub);
        } else if (offload_noeffect(key)) {
            note_noeffect(ld, sub); /* tuning of the transfers, not what moves */
        } else {
            return fail("%s: unknown key %s (offload sections take device, nvme_path, "
                        "pin_memory, buffer_count, buffer_size, max_in_cpu, fast_init, ratio, "
                        "pipeline_read, pipeline_write)", ld->name, sub);
        }
    }
    return 0;
}

/* cpu_offload / cpu_offload_param: the deprecated booleans for device cpu. */
static int zero_cpu_offload(loader *ld, const char *path, const json_t *v)
{
    if (!json_is_boolean(v))
        return fail("%s: %s must be true or false", ld->name, path);
    int param = strstr(path, "cpu_offload_param") != NULL;
    if (json_is_true(v))
        *(param ? &ld->c.offload_param : &ld->c.offload_optimizer) = ZS_OFFLOAD_CPU;
    return 0;
}

static const field fp16_fields[] = {
    A_FUNC("enabled", fp16_enabled, ZS_AUTO_FP16),
    F_FLOAT("loss_scale", static_loss_scale, R_NONNEG),
    F_INT("initial_scale_power", initial_scale_power, R_SCALE_POWER),
    F_COUNT("loss_scale_window", loss_scale_window),
    F_COUNT("hysteresis", hysteresis),
    F_FLOAT("min_loss_scale", min_loss_scale, R_POS),
    F_UNMOD("consecutive_hysteresis", OFF_FALSE,
            "hysteresis restored after every step without overflow", "set it to false"),
    F_FUNC("auto_cast", fp16_auto_cast),
    F_UNMOD("fp16_master_weights_and_grads", OFF_FALSE, "fp16 master weights",
            "set it to false (zerosim keeps fp32 master weights)"),
};
static const field bf16_fields[] = {
    A_FUNC("enabled", bf16_enabled, ZS_AUTO_BF16),
    F_NONE("immediate_grad_update", JT_BOOL),
    F_NONE("check_grad_overflow", JT_BOOL),
    /* fp16's loss-scaling keys, which DeepSpeed ignores under bf16 (its own
     * tests write them) */
    F_NONE("loss_scale", JT_NUMBER),
    F_NONE("initial_scale_power", JT_NUMBER),
    F_NONE("loss_scale_window", JT_NUMBER),
    F_NONE("hysteresis", JT_NUMBER),
    F_NONE("consecutive_hysteresis", JT_BOOL),
    F_NONE("min_loss_scale", JT_NUMBER),
};

#define ZEROPP "remove it, or turn it off (ZeRO++'s qwZ, hpZ and qgZ are modelled: " \
               "zero_quantized_weights, zero_hpz_partition_size, zero_quantized_gradients)"
/* zero_optimization: DeepSpeed's DeepSpeedZeroConfig, with its aliases
 * (stage3_prefetch_bucket_size = prefetch_bucket_size, ...). */
/* ZeRO++ qwZ: zero_optimization.zero_quantized_weights. */
static int zero_quantized_weights(loader *ld, const char *path, const json_t *v)
{
    return read_bool(ld, path, v, &ld->c.quantized_weights);
}

/* ZeRO++ qgZ: zero_optimization.zero_quantized_gradients. */
static int zero_quantized_gradients(loader *ld, const char *path, const json_t *v)
{
    return read_bool(ld, path, v, &ld->c.quantized_gradients);
}

static const field zero_fields[] = {
    F_FUNC("stage", zero_stage),
    A_SIZE("reduce_bucket_size", reduce_bucket_size, ZS_AUTO_REDUCE_BUCKET),
    F_SIZE("allgather_bucket_size", allgather_bucket_size),
    F_SIZE("stage3_max_live_parameters", stage3_max_live_parameters),
    F_SIZE("max_live_parameters", stage3_max_live_parameters),
    A_SIZE("stage3_prefetch_bucket_size", stage3_prefetch_bucket_size, ZS_AUTO_PREFETCH),
    A_SIZE("prefetch_bucket_size", stage3_prefetch_bucket_size, ZS_AUTO_PREFETCH),
    /* timing, memory layout and saving: no effect on what zerosim computes,
     * holds or sends */
    F_FUNC("overlap_comm", zero_overlap_comm),
    F_NONE("contiguous_gradients", JT_BOOL),
    F_NONE("load_from_fp32_weights", JT_BOOL),
    F_NONE("elastic_checkpoint", JT_BOOL),
    F_NONE("ignore_unused_parameters", JT_BOOL),
    F_NONE("round_robin_gradients", JT_BOOL),
    F_NONE("use_multi_rank_bucket_allreduce", JT_BOOL),
    F_NONE("memory_efficient_linear", JT_BOOL),
    F_NONE("override_module_apply", JT_BOOL),
    F_NONE("pipeline_loading_checkpoint", JT_BOOL),
    F_NONE("log_trace_cache_warnings", JT_BOOL),
    F_NONE("grad_hooks", JT_BOOL),
    F_NONE("cpu_offload_use_pin_memory", JT_BOOL),
    F_NONE("stage3_gather_16bit_weights_on_model_save", JT_BOOL),
    F_NONE("gather_16bit_weights_on_model_save", JT_BOOL),
    F_NONE("stage3_gather_fp16_weights_on_model_save", JT_BOOL),
    /* stage-3 tuning zerosim does not model: it partitions every parameter
     * (persistence threshold 0), keeps no parameter for reuse (reuse
     * distance 0), runs the optimizer over the whole shard (one sub-group)
     * and makes one unit per block */
    F_NONE("sub_group_size", JT_NUMBER),
    {.key = "stage3_param_persistence_threshold", .kind = FK_NOEFFECT, .type = JT_NUMBER,
     .autobit = ZS_AUTO_PERSISTENCE},
    {.key = "param_persistence_threshold", .kind = FK_NOEFFECT, .type = JT_NUMBER,
     .autobit = ZS_AUTO_PERSISTENCE},
    F_NONE("stage3_model_persistence_threshold", JT_NUMBER),
    F_NONE("model_persistence_threshold", JT_NUMBER),
    F_NONE("stage3_max_reuse_distance", JT_NUMBER),
    F_NONE("max_reuse_distance", JT_NUMBER),
    F_NONE("stage3_module_granularity_threshold", JT_NUMBER),
    F_NONE("module_granularity_threshold", JT_NUMBER),
    /* real features zerosim does not model yet */
    F_UNMOD("reduce_scatter", OFF_TRUE, "reducing gradients with all-reduce instead of "
            "reduce-scatter", "set it to true or remove it"),
    F_UNMOD("allgather_partitions", OFF_TRUE, "gathering parameters by broadcasts instead of "
            "all-gather", "set it to true or remove it"),
    F_UNMOD("stage3_use_all_reduce_for_fetch_params", OFF_FALSE,
            "fetching stage-3 parameters with all-reduce", "set it to false"),
    F_UNMOD("use_all_reduce_for_fetch_params", OFF_FALSE,
            "fetching stage-3 parameters with all-reduce", "set it to false"),
    F_FUNC("offload_optimizer", zero_offload),
    F_FUNC("offload_param", zero_offload),
    F_FUNC("cpu_offload", zero_cpu_offload),
    F_FUNC("cpu_offload_param", zero_cpu_offload),
    F_INT("zero_hpz_partition_size", hpz_partition_size, R_POS_INT),
    F_FUNC("zero_quantized_weights", zero_quantized_weights),
    F_UNMOD("zero_quantized_nontrainable_weights", OFF_FALSE, "ZeRO++ quantized weights", ZEROPP),
    F_FUNC("zero_quantized_gradients", zero_quantized_gradients),
    F_UNMOD("zeropp_loco_param", OFF_NULL, "ZeRO++ LoCo error feedback", ZEROPP),
    F_UNMOD("mics_shard_size", OFF_NEG, "MiCS sharding", "remove it"),
    F_UNMOD("mics_hierarchical_params_gather", OFF_FALSE, "MiCS hierarchical gathers",
            "set it to false"),
    F_UNMOD("legacy_stage1", OFF_FALSE, "the legacy stage-1 implementation", "set it to false"),
};
/* zerosim.deterministic: order-independent (fixed-point) gradient reduction. */
static int zerosim_deterministic(loader *ld, const char *path, const json_t *v)
{
    return read_bool(ld, path, v, &ld->c.deterministic);
}

/* activation_checkpointing: the section turns checkpointing on (about
 * sqrt(L) segments unless number_checkpoints says how many). */
static int ckpt_number(loader *ld, const char *path, const json_t *v)
{
    double n;
    long long ll;
    ZS_TRY(read_number(ld, path, v, &R_POS_INT, &n, &ll));
    ld->c.checkpoint_mode = ZS_CKPT_SEGMENTS;
    ld->c.checkpoint_value = (int)ll;
    return 0;
}

/* activation_checkpointing.partition_activations: shards the checkpoints
 * over the tensor-parallel group; with --tp 1 there is nothing to shard and
 * it has no effect (finalize refuses it with --tp > 1). */
static int ckpt_partition(loader *ld, const char *path, const json_t *v)
{
    ZS_TRY(read_bool(ld, path, v, &ld->c.partition_activations));
    note_noeffect(ld, path);
    return 0;
}

static const field ckpt_fields[] = {
    F_FUNC("number_checkpoints", ckpt_number),
    F_FUNC("partition_activations", ckpt_partition),
    F_UNMOD("cpu_checkpointing", OFF_FALSE, "keeping checkpointed activations in host memory",
            "set it to false"),
    F_NONE("contiguous_memory_optimization", JT_BOOL),
    F_NONE("synchronize_checkpoint_boundary", JT_BOOL),
    F_NONE("profile", JT_BOOL),
};
static const field_table ckpt_table = TABLE(ckpt_fields);

static int load_ckpt(loader *ld, const char *path, const json_t *v)
{
    if (json_is_object(v) && ld->c.checkpoint_mode == ZS_CKPT_OFF)
        ld->c.checkpoint_mode = ZS_CKPT_SQRT;
    return apply_object(ld, path, v, &ckpt_table, "");
}

/* gradient_compression.method */
static int comp_method(loader *ld, const char *path, const json_t *v)
{
    const char *m = "";
    ZS_TRY(read_string(ld, path, v, "\"none\", \"topk\", \"int8\" or \"sign\"", &m));
    double frac = ld->c.compression.topk_fraction > 0 ? ld->c.compression.topk_fraction : 0.01;
    if (!strcmp(m, "topk"))
        ld->c.compression = (zs_comp_spec){.kind = ZS_COMP_TOPK, .topk_fraction = frac};
    else if (!strcmp(m, "int8"))
        ld->c.compression = (zs_comp_spec){.kind = ZS_COMP_INT8, .topk_fraction = frac};
    else if (!strcmp(m, "sign"))
        ld->c.compression = (zs_comp_spec){.kind = ZS_COMP_SIGN, .topk_fraction = frac};
    else if (!strcmp(m, "none"))
        ld->c.compression = (zs_comp_spec){.kind = ZS_COMP_NONE, .topk_fraction = frac};
    else
        return bad_value(ld, path, v, "\"none\", \"topk\", \"int8\" or \"sign\"");
    return 0;
}

static int comp_fraction(loader *ld, const char *path, const json_t *v)
{
    double f;
    long long ll;
    static const num_rule r = {0, 1, 1, 0, 0, "a number > 0 and <= 1"};
    ZS_TRY(read_number(ld, path, v, &r, &f, &ll));
    ld->c.compression.topk_fraction = f;
    return 0;
}

static int comp_ef(loader *ld, const char *path, const json_t *v)
{
    return read_bool(ld, path, v, &ld->c.error_feedback);
}

static const field comp_fields[] = {
    F_FUNC("method", comp_method),
    F_FUNC("topk_fraction", comp_fraction),
    F_FUNC("error_feedback", comp_ef),
    F_INT("warmup_steps", compression_warmup, R_NONNEG_INT),
};
static const field_table comp_table = TABLE(comp_fields);

/* zerosim.sequence_parallel: Korthikanti et al.'s sequence parallelism. */
static int zerosim_hierarchical(loader *ld, const char *path, const json_t *v)
{
    return read_bool(ld, path, v, &ld->c.hierarchical);
}

static int zerosim_sequence_parallel(loader *ld, const char *path, const json_t *v)
{
    return read_bool(ld, path, v, &ld->c.sequence_parallel);
}

/* zerosim.qat: "none", "int8" or "nf4". */
static int zerosim_qat(loader *ld, const char *path, const json_t *v)
{
    const char *s = NULL;
    zs_quant_format f;
    ZS_TRY(read_string(ld, path, v, "\"none\", \"int8\" or \"nf4\"", &s));
    if (zs_quant_format_parse(s, &f) || f == ZS_QUANT_INT8_ZP)
        return bad_value(ld, path, v, "\"none\", \"int8\" or \"nf4\"");
    ld->c.qat = (int)f;
    return 0;
}

/* zerosim.grad_reduce: "micro-batch" or "step". */
static int zerosim_grad_reduce(loader *ld, const char *path, const json_t *v)
{
    const char *s = NULL;
    ZS_TRY(read_string(ld, path, v, "\"micro-batch\" or \"step\"", &s));
    if (zs_grad_reduce_parse(s, &ld->c.grad_reduce))
        return bad_value(ld, path, v, "\"micro-batch\" or \"step\"");
    return 0;
}

/* zerosim.collective_timeout: seconds, > 0. */
static int zerosim_collective_timeout(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    return read_number(ld, path, v, &R_POS, &ld->c.collective_timeout, &ll);
}

static const field zerosim_fields[] = {
    F_INT("steps", steps, R_POS_INT),
    F_FUNC("deterministic", zerosim_deterministic),
    F_FUNC("sequence_parallel", zerosim_sequence_parallel),
    F_FUNC("hierarchical_collectives", zerosim_hierarchical),
    F_FUNC("grad_reduce", zerosim_grad_reduce),
    F_FUNC("collective_timeout", zerosim_collective_timeout),
    F_FUNC("qat", zerosim_qat),
};
/* moe (a zerosim section, keys named after the arguments of DeepSpeed's
 * deepspeed.moe.layer.MoE and Megatron-DeepSpeed's options): num_experts,
 * ep_size, k, capacity_factor, min_capacity, expert_interval, loss_coeff. */
static int moe_capacity_factor(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    return read_number(ld, path, v, &R_POS, &ld->c.model.moe_capacity_factor, &ll);
}

static int moe_loss_coeff(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    return read_number(ld, path, v, &R_NONNEG, &ld->c.model.moe_aux_coeff, &ll);
}

/* moe.ep_layout (zerosim's): "auto" or "deepspeed". */
static int moe_ep_layout(loader *ld, const char *path, const json_t *v)
{
    const char *s = NULL;
    ZS_TRY(read_string(ld, path, v, "\"auto\" or \"deepspeed\"", &s));
    if (zs_ep_layout_parse(s, &ld->c.ep_layout))
        return fail("%s: \"%s\" must be \"auto\" or \"deepspeed\", got \"%.64s\"", ld->name, path,
                    s);
    return 0;
}

static const field moe_fields[] = {
    F_INT("num_experts", model.moe_experts, R_NONNEG_INT),
    F_INT("ep_size", ep, R_POS_INT),
    F_FUNC("ep_layout", moe_ep_layout),
    F_INT("k", model.moe_top_k, R_POS_INT),
    F_FUNC("capacity_factor", moe_capacity_factor),
    F_INT("min_capacity", model.moe_min_capacity, R_NONNEG_INT),
    F_INT("expert_interval", model.moe_every, R_POS_INT),
    F_FUNC("loss_coeff", moe_loss_coeff),
};
static const field_table moe_table = TABLE(moe_fields);

/* DeepSpeed's tensor_parallel section: the tensor-parallel size. */
static const field tp_fields[] = {
    F_INT("autotp_size", tp, R_POS_INT),
};
static const field_table tp_table = TABLE(tp_fields);
static const field_table fp16_table = TABLE(fp16_fields);
static const field_table bf16_table = TABLE(bf16_fields);
static const field_table zero_table = TABLE(zero_fields);
static const field_table zerosim_table = TABLE(zerosim_fields);

/* ------------------------------------------------------------------------ */
/* model (zerosim extension)                                                 */

/* model.layers of an MLP: the number of hidden layers. */
static int mlp_layers(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    ZS_TRY(read_number(ld, path, v, &R_MLP_LAYERS, &d, &ll));
    ld->c.model.n_hidden = (int)ll;
    return 0;
}

/* model.hidden of an MLP: the width of every hidden layer. */
static int mlp_hidden(loader *ld, const char *path, const json_t *v)
{
    double d;
    long long ll;
    ZS_TRY(read_number(ld, path, v, &R_POS_INT, &d, &ll));
    for (int i = 0; i < ZS_MLP_MAX_HIDDEN; i++)
        ld->c.model.widths[i] = (int)ll;
    return 0;
}

/* model.widths: one positive width per hidden layer. */
static int mlp_widths(loader *ld, const char *path, const json_t *v)
{
    if (!json_is_array(v) || json_array_size(v) > ZS_MLP_MAX_HIDDEN)
        return bad_value(ld, path, v,
                         "an array of at most " XSTR(ZS_MLP_MAX_HIDDEN) " positive integers");
    int n = (int)json_array_size(v);
    for (int i = 0; i < n; i++) {
        char sub[128];
        double d;
        long long ll;
        snprintf(sub, sizeof sub, "%s[%d]", path, i);
        ZS_TRY(read_number(ld, sub, json_array_get(v, (size_t)i), &R_POS_INT, &d, &ll));
        ld->c.model.widths[i] = (int)ll;
    }
    ld->c.model.n_hidden = n;
    return 0;
}

/* model.activation: "relu" or "gelu". */
static int mlp_activation(loader *ld, const char *path, const json_t *v)
{
    const char *s = NULL;
    ZS_TRY(read_string(ld, path, v, "\"relu\" or \"gelu\"", &s));
    if (equal_nocase(s, "relu"))
        ld->c.model.act = ZS_ACT_RELU;
    else if (equal_nocase(s, "gelu"))
        ld->c.model.act = ZS_ACT_GELU;
    else
        return fail("%s: \"%s\" must be \"relu\" or \"gelu\", got \"%.64s\"", ld->name, path, s);
    return 0;
}

static const field gpt_fields[] = {
    F_FUNC("type", skip),
    F_INT("layers", model.n_layer, R_POS_INT),
    F_INT("hidden", model.n_embd, R_POS_INT),
    F_INT("heads", model.n_head, R_POS_INT),
    F_INT("seq", model.seq_len, R_POS_INT),
    F_INT("vocab", model.vocab, R_POS_INT),
};
static const field mlp_fields[] = {
    F_FUNC("type", skip),
    F_FUNC("layers", mlp_layers),
    F_FUNC("hidden", mlp_hidden),
    F_INT("input_dim", model.input_dim, R_POS_INT),
    F_INT("classes", model.n_classes, R_POS_INT),
    F_FUNC("widths", mlp_widths),
    F_FUNC("activation", mlp_activation),
};
static const field_table gpt_table = TABLE(gpt_fields);
static const field_table mlp_table = TABLE(mlp_fields);

/* model: "type" picks the kind (default: the current one) and with it the
 * keys that apply. */
static int load_model(loader *ld, const char *path, const json_t *v)
{
    if (!json_is_object(v))
        return bad_value(ld, path, v, "an object");
    const json_t *t = json_object_get(v, "type");
    if (t) {
        char sub[128];
        const char *s = NULL;
        join(sub, sizeof sub, path, "type");
        ZS_TRY(read_string(ld, sub, t, "\"gpt\" or \"mlp\"", &s));
        if (equal_nocase(s, "gpt"))
            ld->c.model.kind = ZS_MODEL_GPT;
        else if (equal_nocase(s, "mlp"))
            ld->c.model.kind = ZS_MODEL_MLP;
        else
            return fail("%s: \"%s\" must be \"gpt\" or \"mlp\", got \"%.64s\"", ld->name, sub, s);
    }
    if (ld->c.model.kind == ZS_MODEL_GPT)
        return apply_object(ld, path, v, &gpt_table, " for model type \"gpt\"");
    if (json_object_get(v, "widths") &&
        (json_object_get(v, "layers") || json_object_get(v, "hidden")))
        return fail("%s: \"%s.widths\" and \"%s.layers\"/\"%s.hidden\" both describe the hidden "
                    "layers of the MLP: give one or the other",
                    ld->name, path, path, path);
    return apply_object(ld, path, v, &mlp_table, " for model type \"mlp\"");
}

/* ------------------------------------------------------------------------ */
/* The file                                                                  */

/* prescale_gradients: divide by the data-parallel size before the sum. */
static int top_prescale(loader *ld, const char *path, const json_t *v)
{
    int on = 1;
    ZS_TRY(read_bool(ld, path, v, &on));
    ld->c.grad_scaling = on ? ZS_GRAD_PRESCALE : ZS_GRAD_POSTSCALE;
    return 0;
}

/* gradient_predivide_factor: divide by f before the sum, by N/f after. */
static int top_predivide(loader *ld, const char *path, const json_t *v)
{
    long long ll;
    ZS_TRY(read_number(ld, path, v, &R_POS, &ld->c.grad_predivide, &ll));
    if (ld->c.grad_scaling == ZS_GRAD_IN_LOSS)
        ld->c.grad_scaling = ZS_GRAD_POSTSCALE;
    return 0;
}

/* A data type name ("fp32", "fp16", "bf16" and DeepSpeed's spellings), or
 * null; *out = -1 for null. */
static int read_dtype(loader *ld, const char *path, const json_t *v, int *out)
{
    static const struct { const char *name; zs_dtype t; } names[] = {
        {"fp32", ZS_DTYPE_F32}, {"float32", ZS_DTYPE_F32}, {"float", ZS_DTYPE_F32},
        {"fp16", ZS_DTYPE_F16}, {"float16", ZS_DTYPE_F16}, {"half", ZS_DTYPE_F16},
        {"bf16", ZS_DTYPE_BF16}, {"bfloat16", ZS_DTYPE_BF16},
    };
    static const char expect[] = "\"fp32\", \"fp16\", \"bf16\" or null";
    const char *s = NULL;
    if (json_is_null(v)) {
        *out = -1;
        return 0;
    }
    ZS_TRY(read_string(ld, path, v, expect, &s));
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (equal_nocase(s, names[i].name)) {
            *out = (int)names[i].t;
            return 0;
        }
    return bad_value(ld, path, v, expect);
}

/* communication_data_type: finalize checks it names the working precision. */
static int top_comm_dtype(loader *ld, const char *path, const json_t *v)
{
    return read_dtype(ld, path, v, &ld->c.comm_dtype);
}

/* data_types.grad_accum_dtype: the same check. */
static int grad_accum_dtype(loader *ld, const char *path, const json_t *v)
{
    return read_dtype(ld, path, v, &ld->c.grad_accum_dtype);
}
static const field data_types_fields[] = {
    F_FUNC("grad_accum_dtype", grad_accum_dtype),
};
static const field_table data_types_table = TABLE(data_types_fields);

#define OFF_SECTION "remove it, or set \"enabled\": false"
static const field top_fields[] = {
    A_INT("train_batch_size", train_batch_size, R_POS_INT, ZS_AUTO_TRAIN_BATCH),
    A_INT("train_micro_batch_size_per_gpu", micro_batch, R_POS_INT, ZS_AUTO_MICRO_BATCH),
    A_INT("gradient_accumulation_steps", grad_accum, R_POS_INT, ZS_AUTO_GRAD_ACCUM),
    F_COUNT("steps_per_print", steps_per_print),
    A_FLOAT("gradient_clipping", grad_clip, R_NONNEG, ZS_AUTO_GRAD_CLIP),
    F_FUNC("prescale_gradients", top_prescale),
    F_FUNC("gradient_predivide_factor", top_predivide),
    F_FUNC("communication_data_type", top_comm_dtype),
    F_SECTION("data_types", data_types_table),
    F_U64("seed", seed),
    F_FUNC("optimizer", load_optimizer),
    F_FUNC("scheduler", load_scheduler),
    F_SECTION("fp16", fp16_table),
    F_SECTION("bf16", bf16_table),
    F_SECTION("bfloat16", bf16_table), /* DeepSpeed's older name */
    F_SECTION("zero_optimization", zero_table),
    F_FUNC("model", load_model),
    F_SECTION("zerosim", zerosim_table),
    F_FUNC("activation_checkpointing", load_ckpt),
    F_SECTION("gradient_compression", comp_table),
    F_SECTION("tensor_parallel", tp_table),
    F_SECTION("moe", moe_table),
    /* logging, monitoring, profiling, tuning, compilation, I/O tuning and
     * checkpoint-saving options: nothing a simulator computes depends on them */
    F_NONE("wall_clock_breakdown", JT_BOOL),
    F_NONE("memory_breakdown", JT_BOOL),
    F_NONE("dump_state", JT_BOOL),
    F_NONE("zero_allow_untested_optimizer", JT_BOOL),
    F_NONE("zero_force_ds_cpu_optimizer", JT_BOOL),
    F_NONE("disable_allgather", JT_BOOL),
    F_NONE("dataloader_drop_last", JT_BOOL),
    F_NONE("graph_harvesting", JT_BOOL),
    F_NONE("use_data_before_expert_parallelism", JT_BOOL),
    F_NONE("seq_parallel_communication_data_type", JT_STRING),
    F_NONE("vocabulary_size", JT_NUMBER),
    F_NONE("tensorboard", JT_OBJECT),
    F_NONE("wandb", JT_OBJECT),
    F_NONE("comet", JT_OBJECT),
    F_NONE("csv_monitor", JT_OBJECT),
    F_NONE("monitor_config", JT_OBJECT),
    F_NONE("flops_profiler", JT_OBJECT),
    F_NONE("autotuning", JT_OBJECT),
    F_NONE("comms_logger", JT_OBJECT),
    F_NONE("comms_config", JT_OBJECT),
    F_NONE("compile", JT_OBJECT),
    F_NONE("aio", JT_OBJECT),
    F_NONE("checkpoint", JT_OBJECT),
    F_NONE("nebula", JT_OBJECT),
    F_NONE("timers", JT_OBJECT),
    /* real features zerosim does not model yet */
    F_UNMOD("sparse_gradients", OFF_FALSE, "sparse embedding gradients", "set it to false"),
    F_UNMOD("amp", OFF_DISABLED, "NVIDIA Apex AMP", "use \"fp16\" or \"bf16\" instead"),
    F_UNMOD("torch_autocast", OFF_DISABLED, "torch.autocast mixed precision",
            "use \"fp16\" or \"bf16\" instead"),
    F_UNMOD("sparse_attention", OFF_NULL, "block-sparse attention",
            "remove it (zerosim's GPT uses dense causal attention)"),
    F_UNMOD("elasticity", OFF_DISABLED, "elastic training", OFF_SECTION),
    F_UNMOD("eigenvalue", OFF_DISABLED, "eigenvalue computation for quantization", OFF_SECTION),
    F_UNMOD("progressive_layer_drop", OFF_DISABLED, "progressive layer dropping", OFF_SECTION),
    F_UNMOD("curriculum_learning", OFF_DISABLED, "curriculum learning", OFF_SECTION),
    F_UNMOD("data_efficiency", OFF_DISABLED, "data sampling and routing", OFF_SECTION),
    F_UNMOD("compression_training", OFF_DISABLED,
            "DeepSpeed Compression (quantization-aware training, pruning, layer reduction)",
            "remove it, or set every \"enabled\" in it to false"),
    F_UNMOD("quantize_training", OFF_DISABLED, "MoQ quantized training", OFF_SECTION),
    F_UNMOD("weight_quantization", OFF_DISABLED, "weight quantization", OFF_SECTION),
    F_UNMOD("hybrid_engine", OFF_DISABLED, "the RLHF hybrid engine", OFF_SECTION),
    F_UNMOD("pipeline", OFF_NULL, "DeepSpeed's pipeline engine settings",
            "remove it (zerosim's pipeline parallelism is --pp and --pp-schedule)"),
};
static const field_table top_table = TABLE(top_fields);

/* Apply a parsed document onto c (only if all of it is valid). */
static int load_document(const json_t *root, const char *name, zs_run_config *c)
{
    loader ld = {.name = name, .c = *c};
    if (!json_is_object(root)) {
        char got[64];
        describe(root, got, sizeof got);
        return fail("%s: the top level must be a JSON object, got %s", name, got);
    }
    ld.c.noeffect[0] = '\0';
    if (apply_object(&ld, "", root, &top_table, "") && zs_error_msg()[0])
        note_problem(&ld);
    if (json_object_get(root, "bf16") && json_object_get(root, "bfloat16")) {
        fail("%s: \"bf16\" and \"bfloat16\" are the same section (bfloat16 is its older name): "
             "keep one", name);
        note_problem(&ld);
    }
    if (ld.fp16_enabled && ld.bf16_enabled) {
        fail("%s: \"fp16.enabled\" and \"bf16.enabled\" are both true: enable at most one", name);
        note_problem(&ld);
    }
    if (ld.nproblems == 1)
        return zs_error_set("%s", ld.problems[0]);
    if (ld.nproblems > 1) {
        /* every problem on its own line, so that one round fixes them all */
        char msg[ZS_ERROR_MAX];
        int n = snprintf(msg, sizeof msg, "%s: %d problems, one per line:", name, ld.nproblems);
        for (int i = 0; i < ld.nproblems && i < LOADER_MAX_PROBLEMS && n > 0 &&
                        (size_t)n < sizeof msg;
             i++)
            n += snprintf(msg + n, sizeof msg - (size_t)n, "\n  %s", ld.problems[i]);
        if (ld.nproblems > LOADER_MAX_PROBLEMS && n > 0 && (size_t)n < sizeof msg)
            snprintf(msg + n, sizeof msg - (size_t)n, "\n  (and %d more)",
                     ld.nproblems - LOADER_MAX_PROBLEMS);
        return zs_error_set("%s", msg);
    }
    if (ld.fp16_enabled)
        ld.c.precision = ZS_DTYPE_F16;
    else if (ld.bf16_enabled)
        ld.c.precision = ZS_DTYPE_BF16;
    /* DeepSpeed runs an optimizer without a scheduler at a constant rate */
    if (json_object_get(root, "optimizer") && !json_object_get(root, "scheduler")) {
        ld.c.scheduler = ZS_SCHED_CONSTANT;
        ld.c.warmup_steps = 0;
    }
    *c = ld.c;
    return 0;
}

/* Report a jansson parse error as FILE:LINE:COL. */
static int parse_error(const char *name, const json_error_t *err)
{
    return fail("%s:%d:%d: malformed JSON: %s", name, err->line, err->column, err->text);
}

int zs_config_load_string(const char *text, const char *name, zs_run_config *c)
{
    if (!name)
        name = "<string>";
    if (!text)
        return fail("%s: no JSON text given", name);
    json_error_t err;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    if (!root)
        return parse_error(name, &err);
    int rc = load_document(root, name, c);
    json_decref(root);
    return rc;
}

int zs_config_load_file(const char *path, zs_run_config *c)
{
    if (!path)
        return fail("config: no file name given");
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return fail("%s: cannot open: %s", path, strerror(errno));
    json_error_t err;
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    int read_failed = ferror(fp);
    int saved = errno;
    fclose(fp);
    if (!root) {
        if (read_failed)
            return fail("%s: cannot read: %s", path, strerror(saved));
        return parse_error(path, &err);
    }
    int rc = load_document(root, path, c);
    json_decref(root);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Finalize                                                                  */

/* Resolve train_batch_size = micro_batch * grad_accum * world (DeepSpeed's
 * rules: any two determine the third; all three must agree). */
static int resolve_batch(zs_run_config *c, int world)
{
    const char *ws = c->tp * c->pp > 1 ? "data-parallel size" : "world size";
    long long tb = c->train_batch_size, mb = c->micro_batch, ga = c->grad_accum, w = world;

    if (tb < 0 || mb < 0 || ga < 0)
        return fail("train_batch_size (%lld), train_micro_batch_size_per_gpu (%lld) and "
                    "gradient_accumulation_steps (%lld) must be positive (0 = not given)",
                    tb, mb, ga);
    if (tb && mb && ga) {
        if (tb != mb * ga * w)
            return fail("train_batch_size (%lld) must equal train_micro_batch_size_per_gpu (%lld) "
                        "* gradient_accumulation_steps (%lld) * %s (%lld) = %lld: "
                        "fix one of them, or give only two",
                        tb, mb, ga, ws, w, mb * ga * w);
    } else if (tb && mb) {
        if (tb % (mb * w))
            return fail("train_batch_size (%lld) is not divisible by "
                        "train_micro_batch_size_per_gpu (%lld) * %s (%lld) = %lld, so "
                        "gradient_accumulation_steps would not be a whole number",
                        tb, mb, ws, w, mb * w);
        ga = tb / (mb * w);
    } else if (tb && ga) {
        if (tb % (ga * w))
            return fail("train_batch_size (%lld) is not divisible by gradient_accumulation_steps "
                        "(%lld) * %s (%lld) = %lld, so train_micro_batch_size_per_gpu "
                        "would not be a whole number",
                        tb, ga, ws, w, ga * w);
        mb = tb / (ga * w);
    } else if (tb) {
        if (tb % w)
            return fail("train_batch_size (%lld) is not divisible by the %s (%lld): "
                        "give a multiple of it, or set train_micro_batch_size_per_gpu",
                        tb, ws, w);
        ga = 1;
        mb = tb / w;
    } else {
        if (!mb)
            mb = DEFAULT_MICRO_BATCH;
        if (!ga)
            ga = 1;
        tb = mb * ga * w;
    }
    /* Each factor is below 2^31, so the product fits in 64 bits. */
    if (tb > INT_MAX)
        return fail("train_batch_size = train_micro_batch_size_per_gpu (%lld) * "
                    "gradient_accumulation_steps (%lld) * %s (%lld) = %lld is too large",
                    mb, ga, ws, w, tb);
    c->train_batch_size = (int)tb;
    c->micro_batch = (int)mb;
    c->grad_accum = (int)ga;
    return 0;
}

/* A float check for zs_run_config_finalize: the key, the value, whether it
 * is allowed, and the requirement. Comparisons are written so NaN fails. */
typedef struct {
    const char *key;
    double value;
    int ok;
    const char *need;
} float_check;

/* The keys that may be "auto", in ZS_AUTO_* bit order. */
static const char *const auto_keys[ZS_AUTO_COUNT] = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "gradient_clipping", "optimizer.params.lr", "optimizer.params.betas",
    "optimizer.params.eps", "optimizer.params.weight_decay", "scheduler.params.warmup_min_lr",
    "scheduler.params.warmup_max_lr", "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps", "fp16.enabled", "bf16.enabled",
    "zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
};

/* What the "auto" of bit i became, as text. */
static void auto_value(const zs_run_config *c, int i, char *v, size_t n)
{
    switch (i) {
    case 0: snprintf(v, n, "%d", c->train_batch_size); break;
    case 1: snprintf(v, n, "%d", c->micro_batch); break;
    case 2: snprintf(v, n, "%d", c->grad_accum); break;
    case 3: snprintf(v, n, "%g", (double)c->grad_clip); break;
    case 4: snprintf(v, n, "%g", (double)c->lr); break;
    case 5: snprintf(v, n, "[%g, %g]", (double)c->beta1, (double)c->beta2); break;
    case 6: snprintf(v, n, "%g", (double)c->eps); break;
    case 7: snprintf(v, n, "%g", (double)c->weight_decay); break;
    case 8: snprintf(v, n, "%g", (double)(c->warmup_min_ratio * c->lr)); break;
    case 9: snprintf(v, n, "%g", (double)c->lr); break;
    case 10: snprintf(v, n, "%d", c->warmup_steps); break;
    case 11: snprintf(v, n, "%d", c->total_steps); break;
    case 12: snprintf(v, n, "%s", c->precision == ZS_DTYPE_F16 ? "true" : "false"); break;
    case 13: snprintf(v, n, "%s", c->precision == ZS_DTYPE_BF16 ? "true" : "false"); break;
    case 14: snprintf(v, n, "%zu", c->reduce_bucket_size); break;
    case 15: snprintf(v, n, "%zu", c->stage3_prefetch_bucket_size); break;
    default: snprintf(v, n, "%lld (not modelled)", 10LL * c->model.n_embd); break;
    }
}

const char *zs_run_config_describe_auto(const zs_run_config *c, char *buf, size_t n)
{
    size_t len = 0;
    if (n)
        buf[0] = '\0';
    for (int i = 0; i < ZS_AUTO_COUNT && len < n; i++)
        if (c->auto_mask & (1u << i)) {
            char v[64];
            auto_value(c, i, v, sizeof v);
            len += (size_t)snprintf(buf + len, n - len, "%s%s=%s", len ? ", " : "", auto_keys[i],
                                    v);
        }
    return buf;
}

/* A float as the shortest decimal that reads back as it (7 digits), so that
 * 0.001f prints as 0.001 and not 0.00100000005. */
static double f7(float x)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)x);
    return strtod(buf, NULL);
}

char *zs_run_config_json(const zs_run_config *c)
{
    static const char *const sched[] = {"constant", "WarmupLR", "WarmupDecayLR",
                                        "WarmupCosineLR"};
    static const char *const scaling[] = {"in_loss", "prescale", "postscale"};
    json_t *betas = json_pack("[f, f]", f7(c->beta1), f7(c->beta2));
    json_t *opt = json_pack("{s:s, s:f, s:o, s:f, s:f, s:f, s:b, s:b}", "type",
                            c->optimizer == ZS_OPT_ADAMW ? "AdamW" : "SGD", "lr", f7(c->lr),
                            "betas", betas, "eps", f7(c->eps), "weight_decay",
                            f7(c->weight_decay), "momentum", f7(c->momentum),
                            "adam_w_mode", !c->adam_l2, "bias_correction",
                            !c->adam_no_bias_correction);
    json_t *sch = json_pack("{s:s, s:i, s:i, s:f, s:f, s:s}", "type",
                            sched[(int)c->scheduler & 3], "warmup_num_steps", c->warmup_steps,
                            "total_num_steps", c->total_steps, "warmup_min_ratio",
                            f7(c->warmup_min_ratio), "cos_min_ratio", f7(c->cos_min_ratio),
                            "warmup_type", c->warmup_linear ? "linear" : "log");
    json_t *fp16 = json_pack("{s:f, s:i, s:i, s:i, s:f}", "loss_scale",
                             f7(c->static_loss_scale), "initial_scale_power",
                             c->initial_scale_power, "loss_scale_window", c->loss_scale_window,
                             "hysteresis", c->hysteresis, "min_loss_scale",
                             f7(c->min_loss_scale));
    json_t *zero = json_pack("{s:i, s:I, s:I, s:I, s:I, s:s}", "stage", c->stage,
                             "reduce_bucket_size", (json_int_t)c->reduce_bucket_size,
                             "allgather_bucket_size", (json_int_t)c->allgather_bucket_size,
                             "stage3_max_live_parameters",
                             (json_int_t)c->stage3_max_live_parameters,
                             "stage3_prefetch_bucket_size",
                             (json_int_t)c->stage3_prefetch_bucket_size, "grad_reduce",
                             zs_grad_reduce_name(c->grad_reduce));
    if (zero && c->offload_optimizer != ZS_OFFLOAD_NONE)
        json_object_set_new(zero, "offload_optimizer",
                            c->offload_optimizer == ZS_OFFLOAD_NVME
                                ? json_pack("{s:s, s:s}", "device", "nvme", "nvme_path",
                                            c->nvme_path)
                                : json_pack("{s:s}", "device", "cpu"));
    json_t *autos = json_object();
    for (int i = 0; i < ZS_AUTO_COUNT; i++)
        if (c->auto_mask & (1u << i)) {
            char v[64];
            auto_value(c, i, v, sizeof v);
            json_object_set_new(autos, auto_keys[i], json_string(v));
        }
    json_t *none = json_array();
    char list[sizeof c->noeffect];
    snprintf(list, sizeof list, "%s", c->noeffect);
    for (char *tok = strtok(list, ", "); tok; tok = strtok(NULL, ", "))
        json_array_append_new(none, json_string(tok));
    json_t *root = json_pack(
        "{s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:o, s:o, s:o, s:o, s:s, s:f, s:b, s:i, s:i, s:b, "
        "s:o, s:o}",
        "train_batch_size", c->train_batch_size, "train_micro_batch_size_per_gpu", c->micro_batch,
        "gradient_accumulation_steps", c->grad_accum, "steps", c->steps, "steps_per_print",
        c->steps_per_print, "gradient_clipping", f7(c->grad_clip), "precision",
        zs_dtype_name(c->precision), "optimizer", opt, "scheduler", sch, "fp16", fp16,
        "zero_optimization", zero, "gradient_scaling", scaling[(int)c->grad_scaling % 3],
        "gradient_predivide_factor", c->grad_predivide, "deterministic", c->deterministic, "tp",
        c->tp, "pp", c->pp, "sequence_parallel", c->sequence_parallel, "auto", autos,
        "no_effect", none);
    if (root && c->model.moe_experts > 0) /* the moe section, as the file gives it */
        json_object_set_new(
            root, "moe",
            json_pack("{s:i, s:i, s:i, s:f, s:i, s:i, s:f}", "num_experts", c->model.moe_experts,
                      "ep_size", c->ep, "k", c->model.moe_top_k, "capacity_factor",
                      c->model.moe_capacity_factor, "min_capacity", c->model.moe_min_capacity,
                      "expert_interval", c->model.moe_every, "loss_coeff",
                      c->model.moe_aux_coeff));
    if (root && c->model.moe_experts > 0 && c->ep_layout != ZS_EP_LAYOUT_AUTO)
        json_object_set_new(json_object_get(root, "moe"), "ep_layout",
                            json_string(zs_ep_layout_name(c->ep_layout)));
    if (root && c->qat) /* only when on: the printed configurations stay as they were */
        json_object_set_new(root, "qat", json_string(zs_quant_format_name((zs_quant_format)c->qat)));
    char *text = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(root);
    return text;
}

int zs_pp_schedule_parse(const char *s, zs_pp_schedule *out)
{
    if (!strcmp(s, "gpipe"))
        *out = ZS_PP_GPIPE;
    else if (!strcmp(s, "1f1b"))
        *out = ZS_PP_1F1B;
    else if (!strcmp(s, "interleaved"))
        *out = ZS_PP_INTERLEAVED;
    else
        return -1;
    return 0;
}

const char *zs_pp_schedule_name(zs_pp_schedule s)
{
    return s == ZS_PP_GPIPE ? "gpipe" : s == ZS_PP_INTERLEAVED ? "interleaved" : "1f1b";
}

int zs_pp_partition_parse(const char *s, zs_pp_partition *out)
{
    if (!strcmp(s, "uniform"))
        *out = ZS_PP_UNIFORM;
    else if (!strcmp(s, "parameters"))
        *out = ZS_PP_PARAMETERS;
    else
        return -1;
    return 0;
}

const char *zs_pp_partition_name(zs_pp_partition p)
{
    return p == ZS_PP_PARAMETERS ? "parameters" : "uniform";
}

/* The interleaved schedule (--pp-schedule interleaved --virtual-stages v),
 * as Megatron-LM's forward_backward_pipelining_with_interleaving asks it:
 * v >= 2 chunks of equal blocks per rank, m a multiple of P. */
static int check_interleaved(const zs_run_config *c)
{
    int v = c->virtual_stages, P = c->pp, L = c->model.n_layer, m = c->grad_accum;
    if (v < 1)
        return fail("--virtual-stages must be at least 1, got %d", v);
    if (c->pp_schedule != ZS_PP_INTERLEAVED) {
        if (v > 1)
            return fail("--virtual-stages %d is for the interleaved schedule: add --pp-schedule "
                        "interleaved or drop --virtual-stages", v);
        return 0;
    }
    if (P < 2)
        return fail("--pp-schedule interleaved needs --pp of at least 2, got %d", P);
    if (v < 2)
        return fail("--pp-schedule interleaved needs --virtual-stages of at least 2 (model chunks "
                    "per pipeline rank), got %d", v);
    if (c->pp_partition != ZS_PP_UNIFORM)
        return fail("--pp-schedule interleaved cuts the blocks uniformly: drop --pp-partition %s",
                    zs_pp_partition_name(c->pp_partition));
    if (L % P != 0 || (L / P) % v != 0)
        return fail("--virtual-stages %d does not divide the blocks per pipeline rank (%d blocks "
                    "over --pp %d): every one of the %d chunks needs the same number of blocks",
                    v, L, P, P * v);
    if (m % P != 0)
        return fail("--pp-schedule interleaved needs the micro-batches (--grad-accum, %d) to be a "
                    "multiple of --pp %d, as Megatron-LM requires", m, P);
    return 0;
}

/* What the pipeline (--pp > 1) supports; one line saying why otherwise. */
static int check_pipeline(const zs_run_config *c)
{
    if (c->pp <= 1)
        return check_interleaved(c);
    if (c->model.kind != ZS_MODEL_GPT)
        return fail("pipeline parallelism (--pp %d) cuts the GPT's blocks into stages: use "
                    "--model gpt or --pp 1", c->pp);
    if (c->pp > c->model.n_layer)
        return fail("--pp %d is more pipeline stages than the model's %d blocks (model.layers): "
                    "every stage needs at least one block", c->pp, c->model.n_layer);
    if (c->stage == 3 && (c->quantized_weights || c->quantized_gradients ||
                          c->hpz_partition_size > 1))
        return fail("ZeRO++ (zero_quantized_weights, zero_quantized_gradients, "
                    "zero_hpz_partition_size) with --pp %d is not supported yet: turn them off or "
                    "use --pp 1", c->pp);
    if (c->model.moe_experts > 0)
        return fail("mixture of experts (--moe-experts) with --pp %d is not supported yet: use "
                    "--pp 1", c->pp);
    if (c->compression.kind != ZS_COMP_NONE)
        return fail("gradient compression with --pp %d is not supported: use --compression none "
                    "or --pp 1", c->pp);
    if (c->offload_optimizer != ZS_OFFLOAD_NONE)
        return fail("offload_optimizer with --pp %d is not supported: use --offload-optimizer "
                    "none or --pp 1", c->pp);
    return check_interleaved(c);
}

int zs_grad_reduce_parse(const char *s, zs_grad_reduce *out)
{
    if (!strcmp(s, "micro-batch"))
        *out = ZS_GRAD_REDUCE_MICRO;
    else if (!strcmp(s, "step"))
        *out = ZS_GRAD_REDUCE_STEP;
    else
        return -1;
    return 0;
}

const char *zs_grad_reduce_name(zs_grad_reduce g)
{
    return g == ZS_GRAD_REDUCE_STEP ? "step" : "micro-batch";
}

int zs_ep_layout_parse(const char *s, zs_ep_layout *out)
{
    if (!strcmp(s, "auto"))
        *out = ZS_EP_LAYOUT_AUTO;
    else if (!strcmp(s, "deepspeed"))
        *out = ZS_EP_LAYOUT_DEEPSPEED;
    else
        return -1;
    return 0;
}

const char *zs_ep_layout_name(zs_ep_layout l)
{
    return l == ZS_EP_LAYOUT_DEEPSPEED ? "deepspeed" : "auto";
}

int zs_run_config_finalize(zs_run_config *c, int world_size)
{
    if (world_size < 1)
        return fail("world size must be at least 1, got %d", world_size);
    if (c->tp < 1 || c->pp < 1)
        return fail("tensor_parallel.autotp_size (--tp) and --pp must be at least 1, got %d and %d",
                    c->tp, c->pp);
    if (c->ranks_per_node < 0 || (c->ranks_per_node > 0 && world_size % c->ranks_per_node))
        return fail("--ranks-per-node %d must divide the %d ranks (K consecutive ranks make a "
                    "node): use a divisor of %d",
                    c->ranks_per_node, world_size, world_size);
    if (c->quantized_weights && c->stage != 3)
        return fail("zero_optimization.zero_quantized_weights (--quantized-weights, ZeRO++ qwZ) "
                    "quantizes stage 3's parameter gathers: use --stage 3");
    if (c->quantized_weights && c->deterministic)
        return fail("zero_optimization.zero_quantized_weights (--quantized-weights) is lossy "
                    "and deterministic mode promises exact results: drop one of them");
    if (c->hpz_partition_size > 1 && c->stage != 3)
        return fail("zero_optimization.zero_hpz_partition_size %d (--hpz-partition-size, ZeRO++ "
                    "hpZ) partitions stage 3's parameters a second time: use --stage 3, or 1",
                    c->hpz_partition_size);
    if (c->hpz_partition_size > 1 && (world_size / (c->tp * c->pp)) % c->hpz_partition_size)
        return fail("zero_optimization.zero_hpz_partition_size %d must divide the %d "
                    "data-parallel ranks: use a divisor of %d (the ranks per node)",
                    c->hpz_partition_size, world_size / (c->tp * c->pp),
                    world_size / (c->tp * c->pp));
    if (c->hpz_partition_size > 1 && c->offload_param != ZS_OFFLOAD_NONE && c->stage == 3)
        return fail("zero_optimization.zero_hpz_partition_size with offload_param is not "
                    "modelled: drop one of them");
    if (c->quantized_gradients && c->stage != 3)
        return fail("zero_optimization.zero_quantized_gradients (--quantized-gradients, ZeRO++ "
                    "qgZ) replaces stage 3's gradient reduce-scatter: use --stage 3");
    if (c->quantized_gradients && c->deterministic)
        return fail("zero_optimization.zero_quantized_gradients (--quantized-gradients) is lossy "
                    "and deterministic mode promises exact results: drop one of them");
    if (c->quantized_gradients && c->compression.kind != ZS_COMP_NONE)
        return fail("zero_optimization.zero_quantized_gradients and gradient compression both "
                    "replace the reduce-scatter: drop one of them");
    if (c->offload_optimizer != ZS_OFFLOAD_NONE && c->stage == 0)
        return fail("offload_optimizer (--offload-optimizer %s) needs ZeRO stage 1, 2 or 3, as "
                    "DeepSpeed's does: use --stage 1 or higher",
                    zs_offload_name(c->offload_optimizer));
    if (c->offload_param != ZS_OFFLOAD_NONE && c->stage != 3) {
        /* DeepSpeed reads offload_param in stage 3 only */
        size_t n = strlen(c->noeffect);
        if (n + 64 < sizeof c->noeffect)
            snprintf(c->noeffect + n, sizeof c->noeffect - n, "%szero_optimization.offload_param "
                     "(stage %d)", n ? ", " : "", c->stage);
        c->offload_param = ZS_OFFLOAD_NONE;
    }
    if (c->offload_param != ZS_OFFLOAD_NONE && c->offload_optimizer == ZS_OFFLOAD_NONE)
        return fail("offload_param without offload_optimizer (parameters off the device, the "
                    "optimizer on it) is a DeepSpeed feature zerosim does not model yet: add "
                    "--offload-optimizer cpu (or nvme), or drop --offload-param");
    if (c->offload_param == ZS_OFFLOAD_NVME && !c->nvme_path[0])
        return fail("offload_param \"device\": \"nvme\" needs nvme_path (--nvme-path DIR), the "
                    "folder for the parameters' files");
    if (c->offload_optimizer == ZS_OFFLOAD_NVME && !c->nvme_path[0])
        return fail("offload_optimizer \"device\": \"nvme\" needs nvme_path (--nvme-path DIR), "
                    "the folder for the optimizer's files");
    if (world_size % (c->tp * c->pp))
        return fail("%d ranks do not divide into tensor-parallel groups of %d (--tp) times %d "
                    "pipeline stages (--pp): use a number of ranks that %d divides",
                    world_size, c->tp, c->pp, c->tp * c->pp);
    if (c->sequence_parallel && c->tp < 2)
        return fail("sequence parallelism (--sequence-parallel) splits the sequence over the "
                    "tensor-parallel group: it needs --tp 2 or more");
    if (c->tp > 1 && c->model.kind != ZS_MODEL_GPT)
        return fail("tensor parallelism (--tp %d) is implemented for the GPT: use --model gpt or "
                    "--tp 1", c->tp);
    c->model.tp = c->tp;
    c->model.sequence_parallel = c->sequence_parallel;
    if (c->ep < 1)
        return fail("moe.ep_size (--ep) must be at least 1, got %d", c->ep);
    if (c->ep > 256)
        return fail("moe.ep_size (--ep) %d is more than the 256 ranks an expert-parallel group "
                    "may have here: use --ep 256 or less", c->ep);
    if (c->ep > 1 && c->model.moe_experts == 0)
        return fail("expert parallelism (--ep %d) needs a mixture of experts: give "
                    "--moe-experts (moe.num_experts)", c->ep);
    if (c->ep > 1 && (world_size / (c->tp * c->pp)) % c->ep)
        return fail("the expert-parallel size (--ep %d) must divide the data-parallel size (%d "
                    "ranks / (tp %d x pp %d))", c->ep, world_size / (c->tp * c->pp), c->tp, c->pp);
    if (c->ep_layout == ZS_EP_LAYOUT_DEEPSPEED && c->ep <= 1)
        return fail("moe.ep_layout (--ep-layout) \"deepspeed\" lays out expert parallelism: it "
                    "needs --ep 2 or more (moe.ep_size)");
    c->model.moe_ep = c->ep;
    ZS_TRY(resolve_batch(c, world_size / (c->tp * c->pp)));

    if (c->steps <= 0)
        return fail("steps (zerosim.steps) must be > 0, got %d: set a positive number of steps",
                    c->steps);
    if (!(c->collective_timeout > 0) || !isfinite(c->collective_timeout))
        return fail("zerosim.collective_timeout (--collective-timeout) must be a number of "
                    "seconds > 0, got %g", c->collective_timeout);
    if (c->steps_per_print < 0)
        return fail("steps_per_print must be >= 0, got %d", c->steps_per_print);
    if (c->total_steps < 0)
        return fail("total_num_steps (scheduler.params.total_num_steps) must be > 0, got %d",
                    c->total_steps);
    if (c->total_steps == 0)
        c->total_steps = c->steps;
    if (c->warmup_steps < 0)
        return fail("warmup_num_steps (scheduler.params.warmup_num_steps) must be >= 0, got %d",
                    c->warmup_steps);
    if (c->stage < 0 || c->stage > 3)
        return fail("zero_optimization.stage must be 0, 1, 2 or 3, got %d", c->stage);
    if (c->optimizer != ZS_OPT_ADAMW && c->optimizer != ZS_OPT_SGD)
        return fail("optimizer.type is invalid (%d): use AdamW or SGD", (int)c->optimizer);
    if ((int)c->scheduler < ZS_SCHED_CONSTANT || c->scheduler > ZS_SCHED_WARMUP_COSINE)
        return fail("scheduler.type is invalid (%d)", (int)c->scheduler);
    if (c->precision != ZS_DTYPE_F32 && c->precision != ZS_DTYPE_BF16 &&
        c->precision != ZS_DTYPE_F16)
        return fail("precision is invalid (%d): use fp32, bf16 or fp16", (int)c->precision);
    if (c->initial_scale_power < 0 || c->initial_scale_power > MAX_SCALE_POWER)
        return fail("fp16.initial_scale_power must be from 0 to %d, got %d", MAX_SCALE_POWER,
                    c->initial_scale_power);
    if (c->loss_scale_window <= 0)
        return fail("fp16.loss_scale_window must be > 0, got %d", c->loss_scale_window);
    if (c->hysteresis <= 0)
        return fail("fp16.hysteresis must be > 0, got %d", c->hysteresis);

    const float_check checks[] = {
        {"optimizer.params.lr", c->lr, c->lr > 0 && isfinite(c->lr),
         "> 0: set a positive learning rate"},
        {"optimizer.params.betas[0] (beta1)", c->beta1, c->beta1 >= 0 && c->beta1 < 1,
         ">= 0 and < 1"},
        {"optimizer.params.betas[1] (beta2)", c->beta2, c->beta2 >= 0 && c->beta2 < 1,
         ">= 0 and < 1"},
        {"optimizer.params.eps", c->eps, c->eps > 0 && isfinite(c->eps), "> 0"},
        {"optimizer.params.weight_decay", c->weight_decay,
         c->weight_decay >= 0 && isfinite(c->weight_decay), ">= 0 (0 = off)"},
        {"optimizer.params.momentum", c->momentum, c->momentum >= 0 && isfinite(c->momentum),
         ">= 0"},
        {"scheduler.params.warmup_min_ratio", c->warmup_min_ratio,
         c->warmup_min_ratio >= 0 && c->warmup_min_ratio <= 1, "from 0 to 1"},
        {"scheduler.params.cos_min_ratio", c->cos_min_ratio,
         c->cos_min_ratio >= 0 && c->cos_min_ratio <= 1, "from 0 to 1"},
        {"gradient_clipping", c->grad_clip, c->grad_clip >= 0 && isfinite(c->grad_clip),
         ">= 0 (0 = off)"},
        {"fp16.loss_scale", c->static_loss_scale,
         c->static_loss_scale >= 0 && isfinite(c->static_loss_scale), ">= 0 (0 = dynamic)"},
        {"fp16.min_loss_scale", c->min_loss_scale,
         c->min_loss_scale > 0 && isfinite(c->min_loss_scale), "> 0"},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++)
        if (!checks[i].ok)
            return fail("%s must be %s, got %g", checks[i].key, checks[i].need, checks[i].value);

    /* "auto" bucket sizes, as the Hugging Face Trainer sets them from the
     * model's hidden size */
    double h = c->model.n_embd;
    if (c->auto_mask & ZS_AUTO_REDUCE_BUCKET)
        c->reduce_bucket_size = (size_t)(h * h);
    if (c->auto_mask & ZS_AUTO_PREFETCH)
        c->stage3_prefetch_bucket_size = (size_t)(0.9 * h * h);
    if (c->partition_activations && c->tp > 1)
        return fail("activation_checkpointing.partition_activations with --tp %d is a DeepSpeed "
                    "feature zerosim does not model yet (checkpoints sharded over the "
                    "tensor-parallel group): set it to false",
                    c->tp);
    const struct { const char *key; int t; } dtypes[] = {
        {"communication_data_type", c->comm_dtype},
        {"data_types.grad_accum_dtype", c->grad_accum_dtype},
    };
    for (size_t i = 0; i < 2; i++)
        if (dtypes[i].t >= 0 && dtypes[i].t != (int)c->precision)
            return fail("%s \"%s\" with %s training is a DeepSpeed feature zerosim does not model "
                        "yet (zerosim reduces and accumulates gradients in the working precision): "
                        "remove it or set it to \"%s\"",
                        dtypes[i].key, zs_dtype_name((zs_dtype)dtypes[i].t),
                        zs_dtype_name(c->precision), zs_dtype_name(c->precision));
    if (!(c->grad_predivide > 0) || !isfinite(c->grad_predivide))
        return fail("gradient_predivide_factor must be > 0, got %g", c->grad_predivide);

    if (c->compression.kind != ZS_COMP_NONE && c->stage == 0)
        return fail("gradient compression works with ZeRO stages 1, 2 and 3: set "
                    "zero_optimization.stage (--stage) to 1, 2 or 3, or turn compression off");
    if (c->qat && c->tp > 1)
        return fail("quantization-aware training (--qat) works with --tp 1: its scales are "
                    "per whole tensor or block of the tp = 1 layout");
    if (c->compression.kind != ZS_COMP_NONE && c->deterministic)
        return fail("gradient compression and deterministic mode cannot be combined: compressed "
                    "sums are deterministic only for a fixed number of ranks");
    if (c->model.kind == ZS_MODEL_GPT || c->checkpoint_mode != ZS_CKPT_OFF) {
        int L = c->model.n_layer > 0 ? c->model.n_layer : 1, k = 0;
        if (c->checkpoint_mode == ZS_CKPT_EVERY)
            k = c->checkpoint_value;
        else if (c->checkpoint_mode == ZS_CKPT_SEGMENTS)
            k = (L + c->checkpoint_value - 1) / c->checkpoint_value;
        else if (c->checkpoint_mode == ZS_CKPT_SQRT) {
            int nseg = (int)lround(sqrt((double)L));
            k = (L + (nseg > 0 ? nseg : 1) - 1) / (nseg > 0 ? nseg : 1);
        }
        if (c->checkpoint_mode != ZS_CKPT_OFF && k < 1)
            return fail("activation checkpointing needs at least one block per segment");
        c->model.ckpt_blocks = k;
    }
    ZS_TRY(check_pipeline(c));
    return zs_model_config_validate(&c->model);
}

/* One line per key the loader knows, for docs/configuration.md: its path, its
 * kind, and for an unmodelled feature what it is and what to do instead. */
static void print_table(FILE *f, const char *path, const field_table *t)
{
    for (size_t i = 0; i < t->n; i++) {
        const field *x = &t->f[i];
        char p[256];
        join(p, sizeof p, path, x->key);
        switch (x->kind) {
        case FK_SECTION:
            print_table(f, p, x->sub);
            continue;
        case FK_NOEFFECT:
            fprintf(f, "%s: no effect%s\n", p, x->autobit ? " (\"auto\" accepted)" : "");
            continue;
        case FK_UNMODELLED:
            fprintf(f, "%s: not modelled (%s; %s)\n", p, x->what, x->instead);
            continue;
        default:
            fprintf(f, "%s: used%s\n", p, x->autobit ? " (\"auto\" accepted)" : "");
        }
    }
}

void zs_config_print_keys(FILE *f)
{
    /* the sections read by functions rather than by a table of their own */
    static const struct { const char *path; const field_table *t; } more[] = {
        {"optimizer", &typed_table},
        {"optimizer.params (Adam, AdamW)", &adam_table},
        {"optimizer.params (SGD)", &sgd_table},
        {"scheduler", &typed_table},
        {"scheduler.params (WarmupLR)", &schedulers[0].params},
        {"scheduler.params (WarmupDecayLR)", &schedulers[1].params},
        {"scheduler.params (WarmupCosineLR)", &schedulers[2].params},
        {"activation_checkpointing", &ckpt_table},
        {"model (gpt)", &gpt_table},
        {"model (mlp)", &mlp_table},
    };
    print_table(f, "", &top_table);
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        print_table(f, more[i].path, more[i].t);
    static const char *const offload[] = {"zero_optimization.offload_optimizer",
                                          "zero_optimization.offload_param"};
    for (int k = 0; k < 2; k++) {
        fprintf(f, "%s.device: used\n%s.nvme_path: used\n", offload[k], offload[k]);
        fprintf(f, "%s.ratio: not modelled below 1 (partial offload; remove it or set it to 1)\n",
                offload[k]);
        for (size_t i = 0; i < sizeof offload_noeffect_keys / sizeof offload_noeffect_keys[0]; i++)
            fprintf(f, "%s.%s: no effect\n", offload[k], offload_noeffect_keys[i]);
    }
}
