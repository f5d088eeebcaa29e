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
 * Loading works on a copy and commits it only on success, so a failed load
 * leaves the caller's configuration untouched.
 */
#include "zerosim/config.h"
#include "zerosim/error.h"

#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
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

/* The loader's state: the configuration being built and what sections said
 * that only makes sense once the whole file is read. */
typedef struct {
    const char *name;        /* file name for messages */
    zs_run_config c;         /* the configuration being built */
    int fp16_enabled;        /* fp16.enabled was true */
    int bf16_enabled;        /* bf16.enabled was true */
    int opt_is_adamw;        /* optimizer.type named AdamW (not Adam) */
    double warmup_min_lr;    /* WarmupLR / WarmupDecayLR's warmup_min_lr */
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

typedef enum {
    FK_INT,      /* int member */
    FK_SIZE,     /* size_t member */
    FK_U64,      /* uint64_t member */
    FK_FLOAT,    /* float member */
    FK_BOOL,     /* true or false, accepted with no effect in zerosim */
    FK_SECTION,  /* an object described by another table */
    FK_FUNC      /* anything else: a handler */
} field_kind;

typedef int (*field_fn)(loader *ld, const char *path, const json_t *v);

typedef struct field_table field_table;

typedef struct {
    const char *key;
    field_kind kind;
    size_t off;              /* FK_INT..FK_FLOAT: offset in zs_run_config */
    const num_rule *rule;    /* FK_INT..FK_FLOAT: allowed values */
    const field_table *sub;  /* FK_SECTION */
    field_fn fn;             /* FK_FUNC */
} field;

struct field_table {
    const field *f;
    size_t n;
};

#define TABLE(a) { a, sizeof a / sizeof a[0] }
/* Offset of member m, which must have type T (a compile error otherwise). */
#define OFF(m, T) _Generic(((zs_run_config *)0)->m, T: offsetof(zs_run_config, m))
#define F_INT(k, m, r) { k, FK_INT, OFF(m, int), &r, NULL, NULL }
#define F_SIZE(k, m) { k, FK_SIZE, OFF(m, size_t), &R_BIG_INT, NULL, NULL }
#define F_U64(k, m) { k, FK_U64, OFF(m, uint64_t), &R_BIG_INT, NULL, NULL }
#define F_FLOAT(k, m, r) { k, FK_FLOAT, OFF(m, float), &r, NULL, NULL }
#define F_BOOL(k) { k, FK_BOOL, 0, NULL, NULL, NULL }
#define F_SECTION(k, t) { k, FK_SECTION, 0, NULL, &t, NULL }
#define F_FUNC(k, fn) { k, FK_FUNC, 0, NULL, NULL, fn }

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

/* Apply one field's value. */
static int apply_field(loader *ld, const char *path, const field *f, const json_t *v)
{
    char *base = (char *)&ld->c;
    double d = 0;
    long long ll = 0;
    int b;

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
    case FK_BOOL:
        return read_bool(ld, path, v, &b);
    case FK_SECTION:
        return apply_object(ld, path, v, f->sub, "");
    case FK_FUNC:
        return f->fn(ld, path, v);
    }
    return fail("%s: internal error: bad field kind for \"%s\"", ld->name, path);
}

/* Reject keys of obj that t does not list. */
static int check_keys(const loader *ld, const char *path, const json_t *obj, const field_table *t,
                      const char *note)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        size_t i = 0;
        while (i < t->n && strcmp(t->f[i].key, key) != 0)
            i++;
        if (i == t->n)
            return unknown_key(ld, path, key, t, note);
    }
    return 0;
}

/* Apply the JSON object obj, found at path, as described by t: reject keys t
 * does not list, then apply the present fields in table order. note is added
 * to unknown-key messages (for example, which type the keys belong to). */
static int apply_object(loader *ld, const char *path, const json_t *obj, const field_table *t,
                        const char *note)
{
    if (!json_is_object(obj))
        return bad_value(ld, path, obj, "an object");
    ZS_TRY(check_keys(ld, path, obj, t, note));
    for (size_t i = 0; i < t->n; i++) {
        const json_t *v = json_object_get(obj, t->f[i].key);
        if (!v)
            continue;
        char sub[128];
        join(sub, sizeof sub, path, t->f[i].key);
        ZS_TRY(apply_field(ld, sub, &t->f[i], v));
    }
    return 0;
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
    int on;
    ZS_TRY(read_bool(ld, path, v, &on));
    if (on)
        ld->c.weight_decay = 0.01f;
    return 0;
}

/* optimizer.params.adam_w_mode: DeepSpeed's "Adam" with adam_w_mode false is
 * Adam with L2 regularization; "AdamW" ignores the flag. */
static int opt_adam_w_mode(loader *ld, const char *path, const json_t *v)
{
    int on;
    ZS_TRY(read_bool(ld, path, v, &on));
    if (!on && !ld->opt_is_adamw)
        return fail("%s: \"%s\": false selects Adam with L2 regularization, but zerosim implements "
                    "only decoupled weight decay (AdamW): set it to true or remove it",
                    ld->name, path);
    return 0;
}

static const field adam_params[] = {
    F_FLOAT("lr", lr, R_POS),
    F_FUNC("betas", opt_betas),
    F_FLOAT("eps", eps, R_POS),
    F_FUNC("torch_adam", opt_torch_adam),
    F_FLOAT("weight_decay", weight_decay, R_NONNEG),
    F_FUNC("adam_w_mode", opt_adam_w_mode),
};
static const field sgd_params[] = {
    F_FLOAT("lr", lr, R_POS),
    F_FLOAT("momentum", momentum, R_NONNEG),
    F_FLOAT("weight_decay", weight_decay, R_NONNEG),
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

/* optimizer: {type, params}. Adam and AdamW (DeepSpeed's Adam is AdamW by
 * default) start from FusedAdam's defaults, SGD from torch.optim.SGD's. */
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

static const field warmup_params[] = {
    F_FUNC("warmup_min_lr", sched_min_lr),
    F_FUNC("warmup_max_lr", sched_max_lr),
    F_INT("warmup_num_steps", warmup_steps, R_POS_INT),
    F_FUNC("warmup_type", sched_warmup_type),
    F_FUNC("last_batch_iteration", sched_last_iter),
};
static const field warmup_decay_params[] = {
    F_INT("total_num_steps", total_steps, R_POS_INT),
    F_FUNC("warmup_min_lr", sched_min_lr),
    F_FUNC("warmup_max_lr", sched_max_lr),
    F_INT("warmup_num_steps", warmup_steps, R_POS_INT),
    F_FUNC("warmup_type", sched_warmup_type),
    F_FUNC("last_batch_iteration", sched_last_iter),
};
static const field warmup_cosine_params[] = {
    F_INT("total_num_steps", total_steps, R_POS_INT),
    F_FLOAT("warmup_min_ratio", warmup_min_ratio, R_FRACTION),
    F_INT("warmup_num_steps", warmup_steps, R_POS_INT),
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
    if (k == n)
        return fail("%s: \"%s.type\" must be %s (the names are case-sensitive), got \"%.64s\"",
                    ld->name, path, choices, type);

    zs_run_config *c = &ld->c;
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
    int on;
    ZS_TRY(read_bool(ld, path, v, &on));
    if (on)
        return fail("%s: \"%s\": true is not supported (zerosim does not cast model inputs): "
                    "set it to false or remove it",
                    ld->name, path);
    return 0;
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

static const field fp16_fields[] = {
    F_FUNC("enabled", fp16_enabled),
    F_FLOAT("loss_scale", static_loss_scale, R_NONNEG),
    F_INT("initial_scale_power", initial_scale_power, R_SCALE_POWER),
    F_INT("loss_scale_window", loss_scale_window, R_POS_INT),
    F_INT("hysteresis", hysteresis, R_POS_INT),
    F_FLOAT("min_loss_scale", min_loss_scale, R_POS),
    F_BOOL("consecutive_hysteresis"),
    F_FUNC("auto_cast", fp16_auto_cast),
};
static const field bf16_fields[] = {
    F_FUNC("enabled", bf16_enabled),
};
static const field zero_fields[] = {
    F_FUNC("stage", zero_stage),
    F_SIZE("reduce_bucket_size", reduce_bucket_size),
    F_SIZE("allgather_bucket_size", allgather_bucket_size),
    F_SIZE("stage3_max_live_parameters", stage3_max_live_parameters),
    F_SIZE("stage3_prefetch_bucket_size", stage3_prefetch_bucket_size),
    F_BOOL("overlap_comm"),
    F_BOOL("contiguous_gradients"),
    F_BOOL("reduce_scatter"),
    F_BOOL("allgather_partitions"),
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

/* A boolean that zerosim supports only as false (a feature it lacks). */
static int false_only(loader *ld, const char *path, const json_t *v, const char *why)
{
    int on;
    ZS_TRY(read_bool(ld, path, v, &on));
    if (on)
        return fail("%s: \"%s\": true is not supported (%s): set it to false", ld->name, path, why);
    return 0;
}

static int ckpt_partition(loader *ld, const char *path, const json_t *v)
{
    return false_only(ld, path, v, "zerosim has no model parallelism to partition across");
}

static int ckpt_cpu(loader *ld, const char *path, const json_t *v)
{
    return false_only(ld, path, v, "checkpoints stay in device memory in zerosim");
}

static const field ckpt_fields[] = {
    F_FUNC("number_checkpoints", ckpt_number),
    F_FUNC("partition_activations", ckpt_partition),
    F_FUNC("cpu_checkpointing", ckpt_cpu),
    F_BOOL("contiguous_memory_optimization"),
    F_BOOL("synchronize_checkpoint_boundary"),
    F_BOOL("profile"),
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
static int zerosim_sequence_parallel(loader *ld, const char *path, const json_t *v)
{
    return read_bool(ld, path, v, &ld->c.sequence_parallel);
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
    F_FUNC("grad_reduce", zerosim_grad_reduce),
    F_FUNC("collective_timeout", zerosim_collective_timeout),
};
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

static const field top_fields[] = {
    F_INT("train_batch_size", train_batch_size, R_POS_INT),
    F_INT("train_micro_batch_size_per_gpu", micro_batch, R_POS_INT),
    F_INT("gradient_accumulation_steps", grad_accum, R_POS_INT),
    F_INT("steps_per_print", steps_per_print, R_POS_INT),
    F_FLOAT("gradient_clipping", grad_clip, R_NONNEG),
    F_BOOL("wall_clock_breakdown"),
    F_U64("seed", seed),
    F_FUNC("optimizer", load_optimizer),
    F_FUNC("scheduler", load_scheduler),
    F_SECTION("fp16", fp16_table),
    F_SECTION("bf16", bf16_table),
    F_SECTION("zero_optimization", zero_table),
    F_FUNC("model", load_model),
    F_SECTION("zerosim", zerosim_table),
    F_FUNC("activation_checkpointing", load_ckpt),
    F_SECTION("gradient_compression", comp_table),
    F_SECTION("tensor_parallel", tp_table),
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
    ZS_TRY(apply_object(&ld, "", root, &top_table, ""));
    if (ld.fp16_enabled && ld.bf16_enabled)
        return fail("%s: \"fp16.enabled\" and \"bf16.enabled\" are both true: enable at most one",
                    name);
    if (ld.fp16_enabled)
        ld.c.precision = ZS_DTYPE_F16;
    else if (ld.bf16_enabled)
        ld.c.precision = ZS_DTYPE_BF16;
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

int zs_run_config_finalize(zs_run_config *c, int world_size)
{
    if (world_size < 1)
        return fail("world size must be at least 1, got %d", world_size);
    if (c->tp < 1 || c->pp < 1)
        return fail("tensor_parallel.autotp_size (--tp) and --pp must be at least 1, got %d and %d",
                    c->tp, c->pp);
    if (c->pp > 1)
        return fail("pipeline parallelism (--pp %d) is not supported yet: use --pp 1", c->pp);
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

    if (c->compression.kind != ZS_COMP_NONE && c->stage == 0)
        return fail("gradient compression works with ZeRO stages 1, 2 and 3: set "
                    "zero_optimization.stage (--stage) to 1, 2 or 3, or turn compression off");
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
    return zs_model_config_validate(&c->model);
}
