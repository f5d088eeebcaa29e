/* zerosim — the DeepSpeed-style JSON loader (its key schema, the tables, is
 * deepspeed_keys.c).
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
#include "config_impl.h"
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

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */

/* Record a message, replacing control characters (from keys, strings or file
 * names in the input) so that it stays one line. */
static int zs_config_vfail(const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    return zs_error_set("%s", msg);
}

/* printf-style front end of zs_config_vfail. */
int zs_config_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int zs_config_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = zs_config_vfail(fmt, ap);
    va_end(ap);
    return rc;
}

/* ASCII case-insensitive string equality (strcasecmp is POSIX, not C11). */
int zs_ds_equal_nocase(const char *a, const char *b)
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
void zs_ds_describe(const json_t *v, char *buf, size_t n)
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

/* ------------------------------------------------------------------------ */
/* Reading values                                                            */

/* The full key path of key inside path ("" at the top level). */
void zs_ds_join(char *buf, size_t n, const char *path, const char *key)
{
    if (path[0])
        snprintf(buf, n, "%s.%s", path, key);
    else
        snprintf(buf, n, "%s", key);
}

/* The message for a value of the wrong type or out of range. */
int zs_ds_bad_value(const loader *ld, const char *path, const json_t *v, const char *expect)
{
    char got[64];
    zs_ds_describe(v, got, sizeof got);
    const char *hint = "";
    if (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0)
        hint = " (\"auto\" is filled in by the Hugging Face Trainer, not DeepSpeed: write the value)";
    return zs_config_fail("%s: \"%s\" must be %s, got %s%s", ld->name, path, expect, got, hint);
}

/* Read a number allowed by r: its value as a double and, for integral rules,
 * as a long long. */
int zs_ds_read_number(const loader *ld, const char *path, const json_t *v, const num_rule *r,
                       double *d, long long *ll)
{
    if (!json_is_number(v))
        return zs_ds_bad_value(ld, path, v, r->expect);
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
        return zs_ds_bad_value(ld, path, v, r->expect);
    *d = x;
    return 0;
}

/* Read true or false into *out. */
int zs_ds_read_bool(const loader *ld, const char *path, const json_t *v, int *out)
{
    if (!json_is_boolean(v))
        return zs_ds_bad_value(ld, path, v, "true or false");
    *out = json_is_true(v);
    return 0;
}

/* Read a string into *out. */
int zs_ds_read_string(const loader *ld, const char *path, const json_t *v, const char *expect,
                       const char **out)
{
    if (!json_is_string(v))
        return zs_ds_bad_value(ld, path, v, expect);
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
        return zs_config_fail("%s: unknown key \"%s%s%.100s\"%s; check the spelling: did you mean "
                              "\"%s%s%s\"?", ld->name, path, dot, key, note, path, dot, best);
    return zs_config_fail("%s: unknown key \"%s%s%.100s\"%s; check the spelling, or remove it if "
                          "it is a DeepSpeed setting zerosim does not implement", ld->name, path,
                          dot, key, note);
}

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
void zs_ds_note_noeffect(loader *ld, const char *path)
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
    return ok ? 0 : zs_ds_bad_value(ld, path, v, names[k]);
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
        ZS_TRY(zs_ds_read_number(ld, path, v, f->rule, &d, &ll));
        *(int *)(base + f->off) = (int)ll;
        return 0;
    case FK_SIZE:
        ZS_TRY(zs_ds_read_number(ld, path, v, f->rule, &d, &ll));
        *(size_t *)(base + f->off) = (size_t)ll;
        return 0;
    case FK_U64:
        ZS_TRY(zs_ds_read_number(ld, path, v, f->rule, &d, &ll));
        *(uint64_t *)(base + f->off) = (uint64_t)ll;
        return 0;
    case FK_FLOAT:
        ZS_TRY(zs_ds_read_number(ld, path, v, f->rule, &d, &ll));
        *(float *)(base + f->off) = (float)d;
        return 0;
    case FK_COUNT:
        ZS_TRY(zs_ds_read_number(ld, path, v, f->rule, &d, &ll));
        *(int *)(base + f->off) = ll > INT_MAX ? INT_MAX : (int)ll;
        return 0;
    case FK_NOEFFECT:
        ZS_TRY(check_type(ld, path, v, f->type));
        zs_ds_note_noeffect(ld, path);
        return 0;
    case FK_UNMODELLED:
        if (!is_off(v, f->offv))
            return zs_config_fail("%s: \"%s\" is a DeepSpeed feature zerosim does not model yet "
                                  "(%s): %s", ld->name, path, f->what, f->instead);
        zs_ds_note_noeffect(ld, path);
        return 0;
    case FK_SECTION:
        return zs_ds_apply_object(ld, path, v, f->sub, "");
    case FK_FUNC:
        return f->fn(ld, path, v);
    }
    return zs_config_fail("%s: internal error: bad field kind for \"%s\"", ld->name, path);
}

/* Reject keys of obj that t does not list. */
int zs_ds_check_keys(loader *ld, const char *path, const json_t *obj, const field_table *t,
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
            zs_ds_join(sub, sizeof sub, path, key);
            zs_ds_note_noeffect(ld, sub);
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
int zs_ds_apply_object(loader *ld, const char *path, const json_t *obj, const field_table *t,
                        const char *note)
{
    if (!json_is_object(obj))
        return zs_ds_bad_value(ld, path, obj, "an object");
    int rc = zs_ds_check_keys(ld, path, obj, t, note);
    for (size_t i = 0; i < t->n; i++) {
        const json_t *v = json_object_get(obj, t->f[i].key);
        if (!v)
            continue;
        char sub[128];
        zs_ds_join(sub, sizeof sub, path, t->f[i].key);
        int is_auto = json_is_string(v) && strcmp(json_string_value(v), "auto") == 0;
        int frc;
        if (is_auto && t->f[i].autobit)
            frc = apply_auto(ld, sub, &t->f[i]);
        else if (is_auto && t->f[i].kind == FK_NOEFFECT)
            frc = (zs_ds_note_noeffect(ld, sub), 0);
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
int zs_ds_skip(loader *ld, const char *path, const json_t *v)
{
    (void)ld;
    (void)path;
    (void)v;
    return 0;
}

/* Apply a parsed document onto c (only if all of it is valid). */
static int load_document(const json_t *root, const char *name, zs_run_config *c)
{
    loader ld = {.name = name, .c = *c};
    if (!json_is_object(root)) {
        char got[64];
        zs_ds_describe(root, got, sizeof got);
        return zs_config_fail("%s: the top level must be a JSON object, got %s", name, got);
    }
    ld.c.noeffect[0] = '\0';
    if (zs_ds_apply_object(&ld, "", root, &zs_ds_top_table, "") && zs_error_msg()[0])
        note_problem(&ld);
    if (json_object_get(root, "bf16") && json_object_get(root, "bfloat16")) {
        zs_config_fail("%s: \"bf16\" and \"bfloat16\" are the same section (bfloat16 is its older "
                       "name): keep one", name);
        note_problem(&ld);
    }
    if (ld.fp16_enabled && ld.bf16_enabled) {
        zs_config_fail("%s: \"fp16.enabled\" and \"bf16.enabled\" are both true: enable at most "
                       "one", name);
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
    return zs_config_fail("%s:%d:%d: malformed JSON: %s", name, err->line, err->column, err->text);
}

int zs_config_load_string(const char *text, const char *name, zs_run_config *c)
{
    if (!name)
        name = "<string>";
    if (!text)
        return zs_config_fail("%s: no JSON text given", name);
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
        return zs_config_fail("config: no file name given");
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return zs_config_fail("%s: cannot open: %s", path, strerror(errno));
    json_error_t err;
    json_t *root = json_loadf(fp, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    int read_failed = ferror(fp);
    int saved = errno;
    fclose(fp);
    if (!root) {
        if (read_failed)
            return zs_config_fail("%s: cannot read: %s", path, strerror(saved));
        return parse_error(path, &err);
    }
    int rc = load_document(root, path, c);
    json_decref(root);
    return rc;
}
