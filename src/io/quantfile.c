/* zerosim — quantized model files (see zerosim/quantfile.h). */
#include "zerosim/quantfile.h"
#include "zerosim/checkpoint.h"
#include "zerosim/error.h"
#include "zerosim/file.h"
#include "zerosim/io.h"
#include "zerosim/weights.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define QF_FORMAT "zerosim-quantized"
#define QF_VERSION 1

/* ---- the model's shapes as JSON ------------------------------------------------- */

char *zs_model_config_json(const zs_model_config *m)
{
    json_t *j;
    if (m->kind == ZS_MODEL_LLAMA) { /* dense: zs_model_src_load refuses experts */
        j = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:b, s:b}", "kind",
                      "llama", "n_layer", m->n_layer, "n_embd", m->n_embd, "n_head", m->n_head,
                      "n_kv_head", m->n_kv_head > 0 ? m->n_kv_head : m->n_head,
                      "intermediate_size", m->ffn_hidden, "seq_len", m->seq_len, "vocab",
                      m->vocab, "rope_theta", m->rope_theta, "rms_norm_eps", m->norm_eps,
                      "qkv_bias", m->qkv_bias != 0, "tie_embeddings", m->tie_embeddings != 0);
        if (j && m->rope_scaling_factor > 0.0) {
            json_object_set_new(j, "rope_scaling_factor", json_real(m->rope_scaling_factor));
            json_object_set_new(j, "rope_low_freq_factor", json_real(m->rope_low_freq_factor));
            json_object_set_new(j, "rope_high_freq_factor",
                                json_real(m->rope_high_freq_factor));
            json_object_set_new(j, "rope_original_max_pos",
                                json_integer(m->rope_original_max_pos));
        }
    } else if (m->kind == ZS_MODEL_GPT) {
        j = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "kind", "gpt", "n_layer", m->n_layer,
                      "n_embd", m->n_embd, "n_head", m->n_head, "seq_len", m->seq_len, "vocab",
                      m->vocab);
    } else {
        json_t *w = json_array();
        for (int i = 0; i < m->n_hidden; i++)
            json_array_append_new(w, json_integer(m->widths[i]));
        j = json_pack("{s:s, s:i, s:i, s:o, s:s}", "kind", "mlp", "input_dim", m->input_dim,
                      "n_classes", m->n_classes, "widths", w, "activation",
                      m->act == ZS_ACT_GELU ? "gelu" : "relu");
    }
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(j);
    return s;
}

static int qf_json_int(json_t *j, const char *key, const char *what, int *out)
{
    json_t *v = json_object_get(j, key);
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > INT_MAX)
        ZS_FAIL("%s: the model's \"%s\" is missing or not a positive integer", what, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int qf_json_real(json_t *j, const char *key, const char *what, double *out)
{
    json_t *v = json_object_get(j, key);
    if (!json_is_number(v) || !(json_number_value(v) > 0.0) || !isfinite(json_number_value(v)))
        ZS_FAIL("%s: the model's \"%s\" is missing or not a positive number", what, key);
    *out = json_number_value(v);
    return 0;
}

/* A Llama's shapes and arithmetic (zs_model_config_json's "llama"). */
static int qf_llama_from_json(json_t *j, const char *what, zs_model_config *mc)
{
    static const struct { const char *key; size_t off; } ints[] = {
        {"n_layer", offsetof(zs_model_config, n_layer)},
        {"n_embd", offsetof(zs_model_config, n_embd)},
        {"n_head", offsetof(zs_model_config, n_head)},
        {"n_kv_head", offsetof(zs_model_config, n_kv_head)},
        {"intermediate_size", offsetof(zs_model_config, ffn_hidden)},
        {"seq_len", offsetof(zs_model_config, seq_len)},
        {"vocab", offsetof(zs_model_config, vocab)}};
    mc->kind = ZS_MODEL_LLAMA;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        ZS_TRY(qf_json_int(j, ints[i].key, what, (int *)((char *)mc + ints[i].off)));
    ZS_TRY(qf_json_real(j, "rope_theta", what, &mc->rope_theta));
    ZS_TRY(qf_json_real(j, "rms_norm_eps", what, &mc->norm_eps));
    json_t *bias = json_object_get(j, "qkv_bias"), *tied = json_object_get(j, "tie_embeddings");
    if (!json_is_boolean(bias) || !json_is_boolean(tied))
        ZS_FAIL("%s: the model's \"qkv_bias\" or \"tie_embeddings\" is missing or not true or "
                "false", what);
    mc->qkv_bias = json_is_true(bias);
    mc->tie_embeddings = json_is_true(tied);
    if (!json_object_get(j, "rope_scaling_factor"))
        return 0;
    ZS_TRY(qf_json_real(j, "rope_scaling_factor", what, &mc->rope_scaling_factor));
    ZS_TRY(qf_json_real(j, "rope_low_freq_factor", what, &mc->rope_low_freq_factor));
    ZS_TRY(qf_json_real(j, "rope_high_freq_factor", what, &mc->rope_high_freq_factor));
    return qf_json_int(j, "rope_original_max_pos", what, &mc->rope_original_max_pos);
}

int zs_model_config_from_json(const char *text, const char *what, zs_model_config *mc)
{
    memset(mc, 0, sizeof *mc);
    json_t *j = text ? json_loads(text, 0, NULL) : NULL;
    const char *kind = json_string_value(json_object_get(j, "kind"));
    int rc = 0;
    if (!j || !kind || (strcmp(kind, "gpt") && strcmp(kind, "mlp") && strcmp(kind, "llama")))
        rc = zs_error_set("%s: no model in its metadata (kind gpt, llama or mlp); not a zerosim "
                          "file or a damaged one", what);
    else if (!strcmp(kind, "llama"))
        rc = qf_llama_from_json(j, what, mc);
    else if (!strcmp(kind, "gpt")) {
        mc->kind = ZS_MODEL_GPT;
        if (!(rc = qf_json_int(j, "n_layer", what, &mc->n_layer)) &&
            !(rc = qf_json_int(j, "n_embd", what, &mc->n_embd)) &&
            !(rc = qf_json_int(j, "n_head", what, &mc->n_head)) &&
            !(rc = qf_json_int(j, "seq_len", what, &mc->seq_len)))
            rc = qf_json_int(j, "vocab", what, &mc->vocab);
    } else {
        mc->kind = ZS_MODEL_MLP;
        json_t *w = json_object_get(j, "widths");
        const char *act = json_string_value(json_object_get(j, "activation"));
        if (!(rc = qf_json_int(j, "input_dim", what, &mc->input_dim)) &&
            !(rc = qf_json_int(j, "n_classes", what, &mc->n_classes)) &&
            (!json_is_array(w) || json_array_size(w) > ZS_MLP_MAX_HIDDEN))
            rc = zs_error_set("%s: the model's \"widths\" is missing or longer than %d", what,
                              ZS_MLP_MAX_HIDDEN);
        mc->n_hidden = rc ? 0 : (int)json_array_size(w);
        for (int i = 0; i < mc->n_hidden && !rc; i++) {
            json_t *x = json_array_get(w, (size_t)i);
            if (!json_is_integer(x) || json_integer_value(x) < 1 ||
                json_integer_value(x) > INT_MAX)
                rc = zs_error_set("%s: the model's \"widths\" holds a value that is not a width",
                                  what);
            else
                mc->widths[i] = (int)json_integer_value(x);
        }
        mc->act = act && !strcmp(act, "gelu") ? ZS_ACT_GELU : ZS_ACT_RELU;
    }
    json_decref(j);
    if (!rc && zs_model_config_validate(mc))
        rc = zs_error_set("%s: the model it describes is not valid (%s)", what, zs_error_msg());
    return rc;
}

/* ---- writing -------------------------------------------------------------------- */

static int qf_add(zs_st_writer *w, const char *name, const char *suffix, zs_st_dtype dt,
                  int ndim, uint64_t a, uint64_t b)
{
    char nm[128];
    uint64_t shape[2] = {a, b};
    snprintf(nm, sizeof nm, "%s%s", name, suffix);
    return zs_st_writer_add(w, nm, dt, ndim, shape);
}

/* Declare entry e's tensors for the quantized tensor t (NULL: fp32). */
static int qf_declare(zs_st_writer *w, const zs_param_entry *e, const zs_qtensor *t)
{
    if (!t)
        return qf_add(w, e->name, "", ZS_ST_F32, 1, e->numel, 0);
    if (t->spec.format == ZS_QUANT_NF4)
        ZS_TRY(qf_add(w, e->name, ".q", ZS_ST_U8, 1, t->qbytes, 0));
    else
        ZS_TRY(qf_add(w, e->name, ".q", ZS_ST_I8, 2, t->rows, t->cols));
    if (t->spec.double_quant) {
        ZS_TRY(qf_add(w, e->name, ".scale_q", ZS_ST_I8, 1, t->ngroups, 0));
        ZS_TRY(qf_add(w, e->name, ".scale_scale", ZS_ST_F32, 1, t->nsb, 0));
        ZS_TRY(qf_add(w, e->name, ".scale_mean", ZS_ST_F32, 1, 1, 0));
    } else {
        ZS_TRY(qf_add(w, e->name, ".scale", ZS_ST_F32, 1, t->ngroups, 0));
    }
    if (t->spec.format == ZS_QUANT_INT8_ZP)
        ZS_TRY(qf_add(w, e->name, ".zero", ZS_ST_U8, 1, t->ngroups, 0));
    return 0;
}

static int qf_data(zs_st_writer *w, const zs_param_entry *e, const zs_qtensor *t,
                   const float *params)
{
    if (!t)
        return zs_st_writer_data(w, params + e->offset, e->numel * 4);
    ZS_TRY(zs_st_writer_data(w, t->q, t->qbytes));
    if (t->spec.double_quant) {
        ZS_TRY(zs_st_writer_data(w, t->scale_q, t->ngroups));
        ZS_TRY(zs_st_writer_data(w, t->scale_scale, t->nsb * 4));
        ZS_TRY(zs_st_writer_data(w, &t->scale_mean, 4));
    } else {
        ZS_TRY(zs_st_writer_data(w, t->scale, t->ngroups * 4));
    }
    if (t->spec.format == ZS_QUANT_INT8_ZP)
        ZS_TRY(zs_st_writer_data(w, t->zero, t->ngroups));
    return 0;
}

static int qf_meta(zs_st_writer *w, const zs_model_config *mc, uint64_t seed,
                   const zs_quant_spec *s)
{
    char buf[64];
    char *model = zs_model_config_json(mc);
    if (!model)
        ZS_FAIL("out of host memory writing the model's shapes");
    int rc = zs_st_writer_meta(w, "format", QF_FORMAT);
    snprintf(buf, sizeof buf, "%d", QF_VERSION);
    if (!rc)
        rc = zs_st_writer_meta(w, "version", buf);
    if (!rc)
        rc = zs_st_writer_meta(w, "model", model);
    free(model);
    if (!rc)
        rc = zs_st_writer_meta(w, "quant", zs_quant_format_name(s->format));
    snprintf(buf, sizeof buf, "%zu", s->block);
    if (!rc)
        rc = zs_st_writer_meta(w, "block", buf);
    if (!rc)
        rc = zs_st_writer_meta(w, "per_channel", s->per_channel ? "1" : "0");
    if (!rc)
        rc = zs_st_writer_meta(w, "double_quant", s->double_quant ? "1" : "0");
    snprintf(buf, sizeof buf, "%" PRIu64, seed);
    if (!rc)
        rc = zs_st_writer_meta(w, "seed", buf);
    return rc;
}

int zs_qfile_write(const char *path, const zs_model_config *mc, uint64_t seed,
                   const zs_quant_spec *s, const float *params, float *dequant,
                   zs_qfile_stats *st)
{
    zs_model *m = NULL;
    ZS_TRY(zs_model_create(mc, &m));
    const zs_layout *lay = zs_model_layout(m);
    zs_qtensor *qt = calloc((size_t)lay->n_entries, sizeof *qt);
    char *isq = calloc((size_t)lay->n_entries, 1);
    memset(st, 0, sizeof *st);
    int rc = !qt || !isq ? zs_error_set("out of host memory quantizing for %s", path) : 0;
    for (int i = 0; i < lay->n_entries && !rc; i++) {
        const zs_param_entry *e = &lay->entries[i];
        size_t rows, cols;
        if (!zs_quant_entry_matrix(mc, e, &rows, &cols)) {
            st->other_params += e->numel;
            st->other_bytes += 4 * (uint64_t)e->numel;
            if (dequant)
                memcpy(dequant + e->offset, params + e->offset, e->numel * 4);
            continue;
        }
        rc = zs_quant_tensor(s, params + e->offset, rows, cols, &qt[i]);
        if (rc)
            break;
        isq[i] = 1;
        st->quantized_params += e->numel;
        st->quantized_bytes += zs_qtensor_bytes(&qt[i]);
        if (dequant)
            zs_dequant_tensor(&qt[i], dequant + e->offset);
    }
    zs_st_writer w;
    int open = 0;
    if (!rc && !(rc = zs_st_writer_open(&w, path)))
        open = 1;
    if (!rc)
        rc = qf_meta(&w, mc, seed, s);
    for (int i = 0; i < lay->n_entries && !rc; i++)
        rc = qf_declare(&w, &lay->entries[i], isq[i] ? &qt[i] : NULL);
    for (int i = 0; i < lay->n_entries && !rc; i++)
        rc = qf_data(&w, &lay->entries[i], isq[i] ? &qt[i] : NULL, params);
    if (!rc) {
        open = 0;
        rc = zs_st_writer_commit(&w, NULL);
        st->file_bytes = w.f.bytes;
    }
    if (open)
        zs_st_writer_abort(&w);
    for (int i = 0; qt && i < lay->n_entries; i++)
        zs_qtensor_free(&qt[i]);
    free(qt);
    free(isq);
    zs_model_destroy(m);
    return rc;
}

int zs_quant_model(const zs_model_config *mc, const zs_quant_spec *s, const float *params,
                   float *dequant, zs_qfile_stats *st)
{
    zs_model *m = NULL;
    ZS_TRY(zs_model_create(mc, &m));
    const zs_layout *lay = zs_model_layout(m);
    memset(st, 0, sizeof *st);
    int rc = 0;
    for (int i = 0; i < lay->n_entries && !rc; i++) {
        const zs_param_entry *e = &lay->entries[i];
        size_t rows, cols;
        zs_qtensor t;
        if (!zs_quant_entry_matrix(mc, e, &rows, &cols)) {
            st->other_params += e->numel;
            st->other_bytes += 4 * (uint64_t)e->numel;
            memcpy(dequant + e->offset, params + e->offset, e->numel * 4);
        } else if (!(rc = zs_quant_tensor(s, params + e->offset, rows, cols, &t))) {
            st->quantized_params += e->numel;
            st->quantized_bytes += zs_qtensor_bytes(&t);
            zs_dequant_tensor(&t, dequant + e->offset);
            zs_qtensor_free(&t);
        }
    }
    zs_model_destroy(m);
    return rc;
}

/* ---- reading -------------------------------------------------------------------- */

int zs_qfile_is(const char *path)
{
    zs_st_file f;
    if (zs_st_open(&f, path)) {
        zs_error_clear();
        return 0;
    }
    const char *fmt = zs_st_meta(&f, "format");
    int is = fmt && !strcmp(fmt, QF_FORMAT);
    zs_st_close(&f);
    return is;
}

/* Tensor NAME+suffix, of dtype dt and numel elements, read into dst. */
static int qf_get(const zs_st_file *f, const char *name, const char *suffix, zs_st_dtype dt,
                  uint64_t numel, void *dst)
{
    char nm[128];
    snprintf(nm, sizeof nm, "%s%s", name, suffix);
    const zs_st_tensor *t = zs_st_find(f, nm);
    if (!t)
        ZS_FAIL("%s: tensor %s is missing; the file is damaged or not of this model", f->path,
                nm);
    if (t->dtype != dt || zs_st_numel(t) != numel)
        ZS_FAIL("%s: tensor %s is %s of %" PRIu64 " elements, the model needs %s of %" PRIu64
                "; the file is damaged", f->path, nm, zs_st_dtype_name(t->dtype), zs_st_numel(t),
                zs_st_dtype_name(dt), numel);
    return zs_st_read(f, t, 0, dst, (size_t)numel * zs_st_dtype_size(dt));
}

/* The spec from the metadata. */
static int qf_read_spec(const zs_st_file *f, zs_quant_spec *s)
{
    const char *q = zs_st_meta(f, "quant"), *b = zs_st_meta(f, "block"),
               *pc = zs_st_meta(f, "per_channel"), *dq = zs_st_meta(f, "double_quant");
    memset(s, 0, sizeof *s);
    char *end = NULL;
    unsigned long long blk = b ? strtoull(b, &end, 10) : 0;
    if (!q || zs_quant_format_parse(q, &s->format) || s->format == ZS_QUANT_NONE || !b ||
        *end || !pc || !dq || (strcmp(pc, "0") && strcmp(pc, "1")) ||
        (strcmp(dq, "0") && strcmp(dq, "1")))
        ZS_FAIL("%s: the metadata quant, block, per_channel or double_quant is missing or "
                "malformed; the file is damaged", f->path);
    s->block = (size_t)blk;
    s->per_channel = pc[0] == '1';
    s->double_quant = dq[0] == '1';
    zs_quant_spec chk = *s;
    if (zs_quant_spec_finalize(&chk) || chk.block != s->block)
        ZS_FAIL("%s: the metadata's quantization is not one zerosim writes (%s); the file is "
                "damaged", f->path, zs_error_msg());
    return 0;
}

/* Entry e's quantized tensor from the file, checked, into t (allocated). */
static int qf_read_entry(const zs_st_file *f, const zs_param_entry *e, const zs_quant_spec *s,
                         size_t rows, size_t cols, zs_qtensor *t)
{
    memset(t, 0, sizeof *t);
    t->spec = *s;
    t->rows = rows;
    t->cols = cols;
    t->n = e->numel;
    t->group = zs_quant_group_size(s, rows, cols);
    t->ngroups = zs_quant_ngroups(s, rows, cols);
    t->qbytes = s->format == ZS_QUANT_NF4 ? (t->n + 1) / 2 : t->n;
    t->nsb = s->double_quant ? (t->ngroups + ZS_QUANT_DQ_BLOCK - 1) / ZS_QUANT_DQ_BLOCK : 0;
    int bad = !(t->q = malloc(t->qbytes + 1));
    if (s->double_quant)
        bad |= !(t->scale_q = malloc(t->ngroups + 1)) ||
               !(t->scale_scale = malloc(t->nsb * 4 + 1));
    else
        bad |= !(t->scale = malloc(t->ngroups * 4 + 1));
    if (s->format == ZS_QUANT_INT8_ZP)
        bad |= !(t->zero = malloc(t->ngroups + 1));
    if (bad)
        ZS_FAIL("out of host memory reading %s", f->path);
    ZS_TRY(qf_get(f, e->name, ".q", s->format == ZS_QUANT_NF4 ? ZS_ST_U8 : ZS_ST_I8, t->qbytes,
                  t->q));
    if (s->double_quant) {
        ZS_TRY(qf_get(f, e->name, ".scale_q", ZS_ST_I8, t->ngroups, t->scale_q));
        ZS_TRY(qf_get(f, e->name, ".scale_scale", ZS_ST_F32, t->nsb, t->scale_scale));
        ZS_TRY(qf_get(f, e->name, ".scale_mean", ZS_ST_F32, 1, &t->scale_mean));
    } else {
        ZS_TRY(qf_get(f, e->name, ".scale", ZS_ST_F32, t->ngroups, t->scale));
    }
    if (s->format == ZS_QUANT_INT8_ZP)
        ZS_TRY(qf_get(f, e->name, ".zero", ZS_ST_U8, t->ngroups, t->zero));
    int zp = s->format == ZS_QUANT_INT8_ZP;
    for (size_t g = 0; !s->double_quant && g < t->ngroups; g++)
        if (!(zp ? t->scale[g] > 0.0f : t->scale[g] >= 0.0f) || !(t->scale[g] < INFINITY))
            ZS_FAIL("%s: %s.scale holds %g, not a scale; the file is damaged", f->path, e->name,
                    (double)t->scale[g]);
    for (size_t b = 0; b < t->nsb; b++)
        if (!(t->scale_scale[b] >= 0.0f) || !(t->scale_scale[b] < INFINITY) ||
            !isfinite(t->scale_mean))
            ZS_FAIL("%s: %s's double-quantized scales hold a value that is not a scale; the "
                    "file is damaged", f->path, e->name);
    return 0;
}

int zs_qfile_read(const char *path, zs_model_config *mc, uint64_t *seed, zs_quant_spec *s,
                  float **params, zs_qfile_stats *st)
{
    zs_st_file f;
    *params = NULL;
    memset(st, 0, sizeof *st);
    ZS_TRY(zs_st_open(&f, path));
    const char *fmt = zs_st_meta(&f, "format"), *ver = zs_st_meta(&f, "version"),
               *sd = zs_st_meta(&f, "seed");
    int rc = 0;
    char *end = NULL;
    if (!fmt || strcmp(fmt, QF_FORMAT))
        rc = zs_error_set("%s is not a zerosim quantized file (its metadata has no format "
                          "\"%s\")", path, QF_FORMAT);
    else if (!ver || strcmp(ver, "1")) {
        char quoted[64]; /* the file's text: escaped */
        rc = zs_error_set("%s: quantized file version %s; this zerosim reads version %d", path,
                          ver ? zs_file_escape(ver, strlen(ver), quoted, sizeof quoted)
                              : "(none)", QF_VERSION);
    }
    else if (!sd || !(*seed = strtoull(sd, &end, 10), end != sd && !*end))
        rc = zs_error_set("%s: the metadata's seed is missing or malformed; the file is damaged",
                          path);
    if (!rc)
        rc = zs_model_config_from_json(zs_st_meta(&f, "model"), path, mc);
    if (!rc)
        rc = qf_read_spec(&f, s);
    zs_model *m = NULL;
    if (!rc)
        rc = zs_model_create(mc, &m);
    const zs_layout *lay = rc ? NULL : zs_model_layout(m);
    int expect = 0;
    /* every parameter is in the file, in 4 bits at least: a model the file
     * cannot hold is refused before its parameters are allocated */
    if (!rc && lay->num_params / 2 > f.file_bytes - f.data_start)
        rc = zs_error_set("%s: its metadata's model has %zu parameters, more than its %" PRIu64
                          " bytes of tensors hold at 4 bits each; the file is damaged", path,
                          lay->num_params, f.file_bytes - f.data_start);
    if (!rc && !(*params = malloc(lay->num_params * 4 + 1)))
        rc = zs_error_set("out of host memory reading %s", path);
    for (int i = 0; !rc && i < lay->n_entries; i++) {
        const zs_param_entry *e = &lay->entries[i];
        size_t rows, cols;
        if (!zs_quant_entry_matrix(mc, e, &rows, &cols)) {
            rc = qf_get(&f, e->name, "", ZS_ST_F32, e->numel, *params + e->offset);
            st->other_params += e->numel;
            st->other_bytes += 4 * (uint64_t)e->numel;
            expect++;
            continue;
        }
        zs_qtensor t;
        rc = qf_read_entry(&f, e, s, rows, cols, &t);
        if (!rc) {
            zs_dequant_tensor(&t, *params + e->offset);
            st->quantized_params += e->numel;
            st->quantized_bytes += zs_qtensor_bytes(&t);
        }
        zs_qtensor_free(&t);
        expect += 2 + (s->double_quant ? 2 : 0) + (s->format == ZS_QUANT_INT8_ZP);
    }
    if (!rc && f.n != expect)
        rc = zs_error_set("%s holds %d tensors, the model needs %d; the file is damaged or of "
                          "another model", path, f.n, expect);
    if (!rc)
        st->file_bytes = f.file_bytes;
    if (rc) {
        free(*params);
        *params = NULL;
    }
    zs_model_destroy(m);
    zs_st_close(&f);
    return rc;
}
